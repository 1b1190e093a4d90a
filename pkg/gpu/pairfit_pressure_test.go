package gpu_test

import (
	"slices"
	"strconv"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

// roomFleet is a census and a free room a test sets (gpu.FleetRoom).
type roomFleet struct {
	*fleet
	room *gpu.RoomCount
}

func (f *roomFleet) RoomByModel() *gpu.FreeRoom { return f.room.RoomByModel() }

// setRoom makes the fleet's free room t4 idle T4s and a100 idle A100s.
func (f *roomFleet) setRoom(t *testing.T, t4, a100 int) {
	f.room = new(gpu.RoomCount)
	f.room.Replace(nil, nodeWithPods(t, gt.MakeGPUNode("free-t4").GFD("T4", t4, 0)))
	f.room.Replace(nil, nodeWithPods(t, gt.MakeGPUNode("free-a100").GFD("A100", a100, 0)))
}

// TestPairFitPressureFollowsTheRoom: with a fleet that knows its free room
// (gpu.FleetRoom), a class's pressure is charged only while its room is
// short of what the model-limited pods still to come need of it, and the
// answers a view remembers (PlaceAndScore) follow each change.
//
// A quarter of the typical items are whole T4s, the rest whole GPUs of any
// model, on 2 T4s and 2 A100s: the T4s' pressure is 0.2 (TestPairFitModelPrices,
// "a quarter on T4") and their reserve 250 / 1000 = 0.25 of the items. With
// R the T4s' free milli-GPU and F the fleet's, the pressure is charged
// while R < 3 × 0.25 × F, that is while R is below three times the A100s'
// free room. A
// pod of any model on an idle T4 loses 2000 + 0.2 × 1000 − 1000 − 1000 =
// 200 when charged, 0 when not; on an idle A100, 0 either way.
func TestPairFitPressureFollowsTheRoom(t *testing.T) {
	shapes := gpu.StaticShapes{{Demand: gpu.Demand{Count: 1, Milli: 1000}, Weight: 0.75}, {Demand: gpu.Demand{Count: 1, Milli: 1000, Models: []string{"T4"}}, Weight: 0.25}}
	f := &roomFleet{fleet: fleetOf(twoT4TwoA100)}
	p := gpu.MustPolicy(gpu.PolicyPairFit, gpu.PolicyConfig{Shapes: shapes, Fleet: f})
	t4 := nodeWithPods(t, gt.MakeGPUNode("t4").GFD("T4", 2, 0))
	a100 := nodeWithPods(t, gt.MakeGPUNode("a100").GFD("A100", 2, 0))
	req := gpu.Request{Demand: &gpu.Demand{Count: 1, Milli: 1000}, Host: knownHost(64000)}
	for _, step := range []struct {
		name     string
		t4, a100 int
		want     int64
	}{
		{"T4s short: 1000 < 0.75 × 3000", 1, 2, 200},
		{"T4s with room: 4000 ≥ 0.75 × 5000", 4, 1, 0},
		{"short again: 2000 < 0.75 × 3000", 2, 1, 200},
		{"at the mark: 3000 ≥ 0.75 × 4000", 3, 1, 0},
		// A fleet that cannot tell its room charges the pressure always.
		{"no room known", -1, -1, 200},
	} {
		if step.t4 < 0 {
			f.room = new(gpu.RoomCount)
		} else {
			f.setRoom(t, step.t4, step.a100)
		}
		if _, _, s := p.PlaceAndScore(t4, &req); pairFitFieldsOf(s).loss != step.want {
			t.Errorf("%s: %s, want loss %d", step.name, pairFitParts(s), step.want)
		}
		if _, _, s := p.PlaceAndScore(a100, &req); pairFitFieldsOf(s).loss != 0 {
			t.Errorf("%s, on an A100: %s, want loss 0", step.name, pairFitParts(s))
		}
	}
}

// TestRoomCount: a RoomCount sums the free milli-GPU of the views it is
// told of by model, moves a node's count when its view is replaced, and
// publishes a new FreeRoom only when the sum changed.
func TestRoomCount(t *testing.T) {
	var c gpu.RoomCount
	if c.RoomByModel() != nil {
		t.Fatal("a room before any view")
	}
	idle := nodeWithPods(t, gt.MakeGPUNode("a").GFD("T4", 2, 0))
	half := nodeWithPods(t, gt.MakeGPUNode("a").GFD("T4", 2, 0), gpu.Assignment{Devices: []int{0}, Milli: 500})
	a100 := nodeWithPods(t, gt.MakeGPUNode("b").GFD("A100", 1, 0))
	c.Replace(nil, idle)
	c.Replace(nil, a100)
	if r := c.RoomByModel(); r.Of("T4") != 2000 || r.Of("A100") != 1000 || r.Of("V100") != 0 {
		t.Errorf("two nodes: T4 %d, A100 %d, V100 %d; want 2000, 1000, 0", r.Of("T4"), r.Of("A100"), r.Of("V100"))
	}
	before := c.RoomByModel()
	c.Replace(idle, half) // 500 of GPU 0 taken
	if r := c.RoomByModel(); r == before || r.Of("T4") != 1500 || before.Of("T4") != 2000 {
		t.Errorf("after a share: T4 %d (before %d), same room %v; want 1500 in a new room, 2000 kept", r.Of("T4"), before.Of("T4"), r == before)
	}
	after := c.RoomByModel()
	c.Replace(half, half)
	c.Replace(a100, nodeWithPods(t, gt.MakeGPUNode("b").GFD("A100", 1, 0)))
	if c.RoomByModel() != after {
		t.Error("a new room published for views with the same free room")
	}
	c.Replace(half, nil)
	if r := c.RoomByModel(); r.Of("T4") != 0 || r.Of("A100") != 1000 {
		t.Errorf("node a gone: T4 %d, A100 %d; want 0, 1000", r.Of("T4"), r.Of("A100"))
	}
}

// TestLedgerRoomByModel: the ledger's room follows the views it computes,
// the pods bound to a node included; a pod counts from the moment it is
// assumed, before its node is read again, and stops counting when it is
// forgotten; a removed node leaves the room and the census.
func TestLedgerRoomByModel(t *testing.T) {
	l := gpu.NewLedger()
	node := gt.MakeGPUNode("a").GFD("T4", 2, 0).Obj()
	b := gt.MakeGPUNode("b").GFD("A100", 1, 0).Obj()
	b.UID = "b"
	l.Node(b, 1, slices.Values([]*v1.Pod(nil)))
	var pods []*v1.Pod
	for gen := range 3 {
		l.Node(node, int64(gen), slices.Values(pods))
		if want := int64(2000 - 1000*gen); l.RoomByModel().Of("T4") != want {
			t.Errorf("%d GPUs taken: room %d, want %d", gen, l.RoomByModel().Of("T4"), want)
		}
		a := gpu.Assignment{Node: "a", Devices: []int{gen}, Milli: 1000}
		pods = append(pods, gt.MakeGPUPod("p"+strconv.Itoa(gen)).Node("a").Assigned(a).Obj())
	}
	// b's A100: assumed, counted at once; forgotten, free again.
	if err := l.Assume("q", gpu.Assignment{Node: "b", Devices: []int{0}, Milli: 400}); err != nil {
		t.Fatal(err)
	}
	if got := l.RoomByModel().Of("A100"); got != 600 {
		t.Errorf("after assuming 400 on b: A100 room %d, want 600", got)
	}
	l.Forget("q")
	if got := l.RoomByModel().Of("A100"); got != 1000 {
		t.Errorf("after forgetting it: A100 room %d, want 1000", got)
	}
	l.RemoveNode("b")
	if got := l.RoomByModel().Of("A100"); got != 0 {
		t.Errorf("b removed: A100 room %d, want 0", got)
	}
	if census := l.GPUsByModel(); len(census) != 1 || census[0].Model != "T4" {
		t.Errorf("b removed: census %v, want the T4s alone", census)
	}
	// A scheduler's snapshot may hold b's Node object a while longer: read,
	// not counted again. A new Node object of the name counts.
	if v := l.Node(b, 2, slices.Values([]*v1.Pod(nil))); v == nil || v.Len() != 1 {
		t.Fatalf("b read after its removal: %v, want its view", v)
	}
	if got := l.RoomByModel().Of("A100"); got != 0 {
		t.Errorf("b read after its removal: A100 room %d, want 0", got)
	}
	again := gt.MakeGPUNode("b").GFD("A100", 1, 0).Obj()
	again.UID = "b-again"
	l.Node(again, 1, slices.Values([]*v1.Pod(nil)))
	if got := l.RoomByModel().Of("A100"); got != 1000 {
		t.Errorf("b created again: A100 room %d, want 1000", got)
	}
}
