package gpu

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// AnnotationReservations on a Node holds GPUs for pods that do not exist
// yet, or are not placed yet: the defragmenter writes one for each pod a
// migration plan moves (its controller's replacement lands on the GPUs the
// plan chose) and one for the pending pod the plan makes room for, so that
// no other pod takes the room while the plan runs. Its value is a JSON list
// of Reservation.
const AnnotationReservations = "gpusched.io/gpu-reservations"

// Reservation holds GPUs of one node for one pod to come: either the pod
// with UID Pod, or a pod of namespace Namespace whose controller (its
// ownerReference with controller=true) has UID Owner and that asks for
// exactly the reserved GPUs (Reserves). A pod may name any UID as its
// owner, but only in its own namespace does it name its real controller:
// a pod of another namespace never takes an owner's reservation. Every front end's ledger counts a reservation as held
// until it expires or the pod it is for takes it; only that pod may use
// the GPUs.
type Reservation struct {
	// ID names the reservation: the plan's name and the move's number.
	ID string `json:"id"`
	// Pod is the UID of the pod the reservation is for; Owner the UID of
	// the controller whose next pod of the reserved shape it is for.
	// Exactly one is set.
	Pod   types.UID `json:"pod,omitempty"`
	Owner types.UID `json:"owner,omitempty"`
	// Namespace is the owner's namespace, set with Owner.
	Namespace string `json:"namespace,omitempty"`
	// Moves, with Owner, is the UID of the pod whose replacement the
	// reservation is for: the pod the plan moves. Only the defragmenter
	// reads it (a plan whose moved pod still runs was never carried out).
	Moves types.UID `json:"moves,omitempty"`
	// GPUs are the reserved GPUs, as an assignment annotation writes them
	// (node=...;gpus=...;milli=...;memory=...); the node is the
	// annotation's node.
	GPUs string `json:"gpus"`
	// Expires is when the ledger stops holding the GPUs, whether or not the
	// defragmenter is there to remove the reservation.
	Expires time.Time `json:"expires"`
	// Assignment is GPUs parsed.
	Assignment Assignment `json:"-"`
}

// MaxReservationLifetime bounds how far ahead a reservation may expire: one
// that expires later holds nothing. A plan's pods arrive within minutes;
// a reservation that outlives its plan only keeps GPUs idle.
const MaxReservationLifetime = time.Hour

const reservationsAllowed = `want a JSON list of {"id":"<plan>/<n>","pod":"<uid>" or "owner":"<uid>","namespace":"<the owner's>","gpus":"<assignment on this node>","expires":"<RFC 3339 time>"}`

// ReservationsOf reads a node's AnnotationReservations: nil without it. An
// error names the annotation, the value and what is allowed; a node with a
// malformed annotation holds none of its reservations (the ledger reports
// the error with the node's view).
func ReservationsOf(node *v1.Node) ([]Reservation, error) {
	raw, ok := node.Annotations[AnnotationReservations]
	if !ok {
		return nil, nil
	}
	var rs []Reservation
	if err := json.Unmarshal([]byte(raw), &rs); err != nil {
		return nil, invalid(AnnotationReservations, raw, fmt.Sprintf("not a JSON list of reservations (%v); %s", err, reservationsAllowed))
	}
	seen := map[string]bool{}
	for i := range rs {
		r := &rs[i]
		bad := func(why string) error {
			return invalid(AnnotationReservations, raw, fmt.Sprintf("reservation %d (%q): %s; %s", i, r.ID, why, reservationsAllowed))
		}
		a, err := ParseAssignment(r.GPUs)
		switch {
		case r.ID == "":
			return nil, bad("id is missing")
		case seen[r.ID]:
			return nil, bad("id is listed twice")
		case (r.Pod == "") == (r.Owner == ""):
			return nil, bad("exactly one of pod and owner must be set")
		case r.Owner != "" && r.Namespace == "":
			return nil, bad("an owner's reservation needs the owner's namespace")
		case err != nil:
			return nil, bad(fmt.Sprintf("gpus: %v", err))
		case a.Node != node.Name:
			return nil, bad(fmt.Sprintf("gpus name node %q, not this node %q", a.Node, node.Name))
		case r.Expires.IsZero():
			return nil, bad("expires is missing")
		}
		seen[r.ID] = true
		r.Assignment = a
	}
	return rs, nil
}

// FormatReservations is the annotation value holding rs.
func FormatReservations(rs []Reservation) string {
	b, err := json.Marshal(rs)
	if err != nil { // only strings and times: cannot fail
		panic(err)
	}
	return string(b)
}

// Reserves reports whether r is for pod, whose GPU demand is d: the pod r
// names, or a pod of r's controller, in its namespace, whose demand is
// exactly the reserved GPUs (as many, the same part of each, the same
// memory for a share).
func (r *Reservation) Reserves(pod *v1.Pod, d *Demand) bool {
	if r.Pod != "" {
		return r.Pod == pod.UID
	}
	ref := metav1.GetControllerOfNoCopy(pod)
	if ref == nil || ref.UID != r.Owner || pod.Namespace != r.Namespace {
		return false
	}
	a := &r.Assignment
	return d.Count == len(a.Devices) && d.Milli == a.Milli && (!d.IsShare() || d.MemoryMiB == a.MemoryMiB)
}

// ReservationFor is the reservation on n that pod, with demand d, may take:
// the first that Reserves it, or nil. Only reservations n holds count (a
// view counts those not expired and not taken).
func (n *NodeGPUs) ReservationFor(pod *v1.Pod, d *Demand) *Reservation {
	for i := range n.Reserved {
		if n.Reserved[i].Reserves(pod, d) {
			return &n.Reserved[i]
		}
	}
	return nil
}

// Current reports whether r holds its GPUs at now: not expired, and not
// expiring beyond MaxReservationLifetime.
func (r *Reservation) Current(now time.Time) bool {
	return now.Before(r.Expires) && !r.Expires.After(now.Add(MaxReservationLifetime))
}

// holdReservations counts on n the reservations of its node that are
// Current at now and not taken by a pod counted on n (counted: the
// UIDs of the pods whose assignments n counts). takenBy names the pod that
// took a reservation.
func holdReservations(n *NodeGPUs, rs []Reservation, now time.Time, takenBy func(id string) (types.UID, bool), counted []types.UID) {
	for _, r := range rs {
		if !r.Current(now) {
			continue
		}
		if uid, ok := takenBy(r.ID); ok && slices.Contains(counted, uid) {
			continue
		}
		n.add(&r.Assignment)
		n.Reserved = append(n.Reserved, r)
	}
}

// Onto is an Excluder that leaves only r's GPUs to choose from, beside what
// inner (which may be nil) excludes: the pod that takes r is placed on the
// GPUs the plan chose for it, when they still suit it.
func (r *Reservation) Onto(inner Excluder) Excluder { return reservedOnly{r: r, inner: inner} }

type reservedOnly struct {
	r     *Reservation
	inner Excluder
}

func (x reservedOnly) Excluded(node string, inv *Inventory) (DeviceSet, string) {
	var set DeviceSet
	var why string
	if x.inner != nil {
		set, why = x.inner.Excluded(node, inv)
	}
	for i, d := range inv.Devices {
		if !slices.Contains(x.r.Assignment.Devices, d.Index) {
			set |= 1 << uint(i)
		}
	}
	if why == "" {
		why = "not the GPUs of reservation " + x.r.ID
	}
	return set, why
}
