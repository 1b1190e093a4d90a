package gang

import (
	"time"
)

// SortKey is what the scheduling queue orders a pod by.
type SortKey struct {
	// Priority is the pod's priority; higher goes first.
	Priority int32
	// Since is the gang's creation time, or for a pod outside any gang the
	// time it entered the queue; earlier goes first.
	Since time.Time
	// Group is the gang's "namespace/name", "" outside a gang. It keeps the
	// pods of gangs created in the same second apart.
	Group string
	// Enqueued is when the pod entered the queue, and Pod its
	// "namespace/name": the order within a gang.
	Enqueued time.Time
	Pod      string
}

// Less orders the queue: by priority, then by the gang's age, then by gang,
// then by the pod's own age. All pods of a gang share the first three keys,
// so the queue hands them out one after the other and no other pod of equal
// priority comes between them: a gang's pods reach Permit together instead
// of holding GPUs while another gang's pods are served.
func Less(a, b SortKey) bool {
	if a.Priority != b.Priority {
		return a.Priority > b.Priority
	}
	if !a.Since.Equal(b.Since) {
		return a.Since.Before(b.Since)
	}
	if a.Group != b.Group {
		return a.Group < b.Group
	}
	if !a.Enqueued.Equal(b.Enqueued) {
		return a.Enqueued.Before(b.Enqueued)
	}
	return a.Pod < b.Pod
}
