package gpu

// SeenCount is how many pod UIDs the window remembers as counted.
func (w *ShapeWindow) SeenCount() int64 { return w.nSeen.Load() }

// FrontMismatch names a node whose entry in the ledger's front cache is not
// its current entry, if there is one.
func (l *Ledger) FrontMismatch() (string, bool) {
	front := l.front.Load()
	if front == nil {
		return "", false
	}
	for i := range front {
		if c := front[i].Load(); c != nil && l.cached(c.source.Name) != c {
			return c.source.Name, true
		}
	}
	return "", false
}

// HasFront reports whether the ledger has allocated its front cache.
func (l *Ledger) HasFront() bool { return l.front.Load() != nil }
