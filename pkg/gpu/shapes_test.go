package gpu_test

import (
	"testing"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// TestShapeWindowForgetsDeletedPods: a pod is remembered once however often
// it is observed, and forgetting a deleted pod shrinks the set, so it stays
// as large as the live pods rather than growing with every pod ever seen.
func TestShapeWindowForgetsDeletedPods(t *testing.T) {
	w := gpu.NewShapeWindow(1000, nil)
	d := gpu.Demand{Milli: 500}
	w.ObservePod("a", d)
	w.ObservePod("a", d) // scheduled again while pending
	w.ObservePod("b", d)
	if got := w.SeenCount(); got != 2 {
		t.Fatalf("remembered %d pods, want 2", got)
	}
	w.ForgetPod("a")
	w.ForgetPod("a") // a second delete event changes nothing
	w.ForgetPod("never-seen")
	if got := w.SeenCount(); got != 1 {
		t.Errorf("after forgetting a: remembered %d pods, want 1", got)
	}
}
