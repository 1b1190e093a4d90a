package gpu

// SeenCount is how many pod UIDs the window remembers as counted.
func (w *ShapeWindow) SeenCount() int64 { return w.nSeen.Load() }
