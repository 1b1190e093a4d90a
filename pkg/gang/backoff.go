package gang

import (
	"sync"
	"time"
)

// Backoff remembers which gangs were released and until when they wait
// before their pods are tried again. It is safe for concurrent use.
type Backoff struct {
	now func() time.Time

	mu    sync.Mutex
	until map[string]time.Time // guarded by mu
}

// NewBackoff returns a Backoff reading time from now (time.Now when nil).
func NewBackoff(now func() time.Time) *Backoff {
	if now == nil {
		now = time.Now
	}
	return &Backoff{now: now, until: map[string]time.Time{}}
}

// Start makes the gang wait for d from now, unless it already waits: a
// gang released by several of its pods at once backs off once. It returns
// the end of the wait and whether this call started it. d ≤ 0 starts nothing.
func (b *Backoff) Start(group string, d time.Duration) (time.Time, bool) {
	if d <= 0 {
		return time.Time{}, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	if until, ok := b.until[group]; ok && now.Before(until) {
		return until, false
	}
	until := now.Add(d)
	b.until[group] = until
	return until, true
}

// Until returns the end of the gang's wait, if it is waiting now. An ended
// wait is forgotten.
func (b *Backoff) Until(group string) (time.Time, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	until, ok := b.until[group]
	if !ok {
		return time.Time{}, false
	}
	if !b.now().Before(until) {
		delete(b.until, group)
		return time.Time{}, false
	}
	return until, true
}
