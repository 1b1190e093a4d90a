package gpu_test

import (
	"cmp"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

func TestReservationsOfRefusesMalformed(t *testing.T) {
	soon := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	cases := []struct {
		name, value, want string
	}{
		{"not JSON", `{`, "not a JSON list"},
		{"no id", `[{"pod":"u","gpus":"node=n;gpus=0","expires":"` + soon + `"}]`, "id is missing"},
		{"twice", `[{"id":"a","pod":"u","gpus":"node=n;gpus=0","expires":"` + soon + `"},{"id":"a","pod":"v","gpus":"node=n;gpus=1","expires":"` + soon + `"}]`, "listed twice"},
		{"pod and owner", `[{"id":"a","pod":"u","owner":"o","gpus":"node=n;gpus=0","expires":"` + soon + `"}]`, "exactly one of pod and owner"},
		{"neither", `[{"id":"a","gpus":"node=n;gpus=0","expires":"` + soon + `"}]`, "exactly one of pod and owner"},
		{"owner without namespace", `[{"id":"a","owner":"o","gpus":"node=n;gpus=0","expires":"` + soon + `"}]`, "needs the owner's namespace"},
		{"bad gpus", `[{"id":"a","pod":"u","gpus":"node=n;gpus=x","expires":"` + soon + `"}]`, "not a non-negative integer"},
		{"other node", `[{"id":"a","pod":"u","gpus":"node=m;gpus=0","expires":"` + soon + `"}]`, `name node "m", not this node "n"`},
		{"no expiry", `[{"id":"a","pod":"u","gpus":"node=n;gpus=0"}]`, "expires is missing"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			node := gt.MakeGPUNode("n").GFD("A100", 2, 40960).Annotation(gpu.AnnotationReservations, c.value).Obj()
			_, err := gpu.ReservationsOf(node)
			var invalid *gpu.InvalidValueError
			if !errors.As(err, &invalid) || invalid.Field != gpu.AnnotationReservations || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("ReservationsOf(%s) = %v, want an error on %s saying %q", c.value, err, gpu.AnnotationReservations, c.want)
			}
			// The node's GPUs are still read; its view holds no reservation
			// and says why.
			view := gpu.NewLedger().Node(node, 1, slices.Values([]*v1.Pod(nil)))
			if view.Err != nil || view.ReservationsErr == nil || len(view.Reserved) != 0 || view.UsedMilli() != 0 {
				t.Fatalf("view: err %v, reservations err %v, reserved %v, used %d", view.Err, view.ReservationsErr, view.Reserved, view.UsedMilli())
			}
		})
	}
}

// reservations of node n (2 A100s), parsed: forPod holds GPU 0 whole for
// pod UID "pending"; forRS a share of 250 milli-GPU and 10 GiB of GPU 1 for
// the next such pod of ReplicaSet "rs-uid".
func reservations(t *testing.T) (forPod, forRS gpu.Reservation) {
	soon := time.Now().Add(time.Hour).UTC()
	rs := []gpu.Reservation{
		{ID: "plan/0", Pod: "pending", GPUs: "node=n;gpus=0;milli=1000;memory=0", Expires: soon},
		{ID: "plan/1", Owner: "rs-uid", Namespace: "team", GPUs: "node=n;gpus=1;milli=250;memory=10240", Expires: soon},
	}
	node := gt.MakeGPUNode("n").GFD("A100", 2, 40960).Annotation(gpu.AnnotationReservations, gpu.FormatReservations(rs)).Obj()
	parsed, err := gpu.ReservationsOf(node)
	if err != nil {
		t.Fatal(err)
	}
	return parsed[0], parsed[1]
}

func TestLedgerHoldsReservations(t *testing.T) {
	forPod, forRS := reservations(t)
	rs := []gpu.Reservation{forPod, forRS,
		{ID: "old/0", Pod: "gone", GPUs: "node=n;gpus=1;milli=1000;memory=0", Expires: time.Now().Add(-time.Minute)},
		{ID: "far/0", Pod: "far", GPUs: "node=n;gpus=1;milli=1000;memory=0", Expires: time.Now().Add(2 * gpu.MaxReservationLifetime)}}
	node := gt.MakeGPUNode("n").GFD("A100", 2, 40960).Annotation(gpu.AnnotationReservations, gpu.FormatReservations(rs)).Obj()
	l, cache := gpu.NewLedger(), newPodCache()

	// GPU 0 whole for the pending pod, 250 of GPU 1 for the ReplicaSet;
	// the expired reservation holds nothing, nor one that would hold GPUs
	// beyond MaxReservationLifetime (a writer's attempt to keep them).
	view := cache.view(l, node)
	if got := usedMilli(view); got[0] != 1000 || got[1] != 250 || len(view.Reserved) != 2 {
		t.Fatalf("used %v, reserved %v; want [1000 250] and 2 reservations", got, view.Reserved)
	}
	if view.Used[1].MemoryMiB != 10240 {
		t.Fatalf("GPU 1 memory reserved %d MiB, want 10240", view.Used[1].MemoryMiB)
	}

	// Who may take them: the pending pod by UID; a pod of the ReplicaSet
	// asking for exactly the reserved share; nobody else.
	share := func(milli int64, mem string) *gpu.Demand {
		return &gpu.Demand{Count: 1, Milli: milli, MemoryMiB: map[string]int64{"10Gi": 10240, "20Gi": 20480}[mem]}
	}
	whole := &gpu.Demand{Count: 1, Milli: 1000}
	cases := []struct {
		name string
		pod  *gpu.Demand
		uid  string
		own  string
		ns   string // "team" when empty
		want string
	}{
		{"the pending pod", whole, "pending", "", "", "plan/0"},
		{"another pod", whole, "other", "", "", ""},
		{"the ReplicaSet's share", share(250, "10Gi"), "new", "rs-uid", "", "plan/1"},
		{"a larger share of it", share(300, "10Gi"), "new", "rs-uid", "", ""},
		{"more memory", share(250, "20Gi"), "new", "rs-uid", "", ""},
		{"another ReplicaSet", share(250, "10Gi"), "new", "rs-other", "", ""},
		// A tenant may name any UID as its pod's owner: in another
		// namespace that never takes the reservation.
		{"a pod of another namespace naming the owner", share(250, "10Gi"), "new", "rs-uid", "intruder", ""},
		{"the expired pod", whole, "gone", "", "", ""},
		{"the pod of a reservation too far ahead", whole, "far", "", "", ""},
	}
	for _, c := range cases {
		w := gt.MakeGPUPod("p").UID(c.uid).Namespace(cmp.Or(c.ns, "team"))
		if c.own != "" {
			w = w.OwnedBy("ReplicaSet", "rs", c.own)
		}
		r := view.ReservationFor(w.Obj(), c.pod)
		if got := ""; r != nil {
			got = r.ID
			if got != c.want {
				t.Errorf("%s: takes %q, want %q", c.name, got, c.want)
			}
		} else if c.want != "" {
			t.Errorf("%s: takes nothing, want %q", c.name, c.want)
		}
	}

	// Another pod cannot be assumed on the reserved GPUs.
	if err := l.Assume("other", gpu.Assignment{Node: "n", Devices: []int{0}, Milli: 1000}); err == nil {
		t.Fatal("a pod was assumed on GPUs reserved for another")
	}
	// The ReplicaSet's new pod takes its reservation: 250 on GPU 1 count
	// once (250, not 500) while it is assumed and once it is bound.
	a := forRS.Assignment
	if err := l.AssumeReserved("new", a, forRS.ID); err != nil {
		t.Fatal(err)
	}
	// The ledger's free room counts the share once too, at once: GPU 1's
	// 1000 − 250 (500 if the pod counted beside its reservation).
	if got := l.RoomByModel().Of("A100"); got != 750 {
		t.Errorf("assumed on its reservation: A100 room %d, want 750", got)
	}
	cache.put(gt.MakeGPUPod("new").UID("new").Node("n").Obj())
	if got := usedMilli(cache.view(l, node)); got[1] != 250 {
		t.Fatalf("assumed on its reservation: GPU 1 used %d, want 250", got[1])
	}
	cache.put(gt.MakeGPUPod("new").UID("new").Node("n").Assigned(a).Obj())
	if got := usedMilli(cache.view(l, node)); got[1] != 250 {
		t.Fatalf("bound on its reservation: GPU 1 used %d, want 250", got[1])
	}
	// Deleted: the reservation holds its GPUs again until the defragmenter
	// removes it.
	cache.remove("new")
	if got := usedMilli(cache.view(l, node)); got[1] != 250 {
		t.Fatalf("taker gone: GPU 1 used %d, want the reservation's 250", got[1])
	}
	// A pod that asks AssumeReserved for a reservation the node lacks is refused.
	if err := l.AssumeReserved("x", a, "no-such"); err == nil {
		t.Fatal("AssumeReserved took a reservation the node does not hold")
	}
}

func TestLedgerForgetGivesBackAReservation(t *testing.T) {
	forPod, _ := reservations(t)
	node := gt.MakeGPUNode("n").GFD("A100", 2, 40960).Annotation(gpu.AnnotationReservations, gpu.FormatReservations([]gpu.Reservation{forPod})).Obj()
	l, cache := gpu.NewLedger(), newPodCache()
	cache.view(l, node)
	if err := l.AssumeReserved("pending", forPod.Assignment, forPod.ID); err != nil {
		t.Fatal(err)
	}
	cache.put(gt.MakeGPUPod("pending").UID("pending").Node("n").Obj())
	if got := usedMilli(cache.view(l, node)); got[0] != 1000 {
		t.Fatalf("assumed: used %v", got)
	}
	// The bind failed: Unreserve forgets the pod and the cache drops it.
	l.Forget("pending")
	cache.remove("pending")
	view := cache.view(l, node)
	if got := usedMilli(view); got[0] != 1000 || len(view.Reserved) != 1 {
		t.Fatalf("after Forget: used %v, reserved %v; want the reservation held again", got, view.Reserved)
	}
	// The reservation expires: a node whose view is cached is read again
	// once it has.
	rs := []gpu.Reservation{forPod}
	rs[0].Expires = time.Now().Add(50 * time.Millisecond)
	node = gt.MakeGPUNode("n").GFD("A100", 2, 40960).ResourceVersion("2").Annotation(gpu.AnnotationReservations, gpu.FormatReservations(rs)).Obj()
	if got := usedMilli(cache.view(l, node)); got[0] != 1000 {
		t.Fatalf("before expiry: used %v", got)
	}
	time.Sleep(60 * time.Millisecond)
	if got := usedMilli(cache.view(l, node)); got[0] != 0 {
		t.Fatalf("after expiry: used %v, want nothing held", got)
	}
}
