package gang

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Reservations are the pods of each gang that passed Reserve and have not
// been released: they hold GPUs in the scheduler while they wait at Permit,
// and keep counting for their gang once bound until they are forgotten. It
// is safe for concurrent use.
type Reservations struct {
	mu sync.Mutex
	// byGroup maps a gang to its reserved pods and their nodes; groupOf is
	// the reverse index. since is when the gang's first current reservation
	// was made. Guarded by mu.
	byGroup map[string]map[types.UID]string
	groupOf map[types.UID]string
	since   map[string]time.Time
}

// NewReservations returns empty Reservations.
func NewReservations() *Reservations {
	return &Reservations{byGroup: map[string]map[types.UID]string{}, groupOf: map[types.UID]string{}, since: map[string]time.Time{}}
}

// Add records that pod uid of group is reserved on node at now. It returns
// when the gang's first current reservation was made.
func (r *Reservations) Add(group string, uid types.UID, node string, now time.Time) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	pods := r.byGroup[group]
	if pods == nil {
		pods = map[types.UID]string{}
		r.byGroup[group] = pods
		r.since[group] = now
	}
	pods[uid] = node
	r.groupOf[uid] = group
	return r.since[group]
}

// Since returns when the gang's first current reservation was made, if it
// has any.
func (r *Reservations) Since(group string) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	since, ok := r.since[group]
	return since, ok
}

// Remove forgets pod uid, if it is reserved.
func (r *Reservations) Remove(uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	group, ok := r.groupOf[uid]
	if !ok {
		return
	}
	delete(r.groupOf, uid)
	delete(r.byGroup[group], uid)
	if len(r.byGroup[group]) == 0 {
		delete(r.byGroup, group)
		delete(r.since, group)
	}
}

// Of returns a copy of the gang's reserved pods and their nodes.
func (r *Reservations) Of(group string) map[types.UID]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[types.UID]string, len(r.byGroup[group]))
	for uid, node := range r.byGroup[group] {
		out[uid] = node
	}
	return out
}
