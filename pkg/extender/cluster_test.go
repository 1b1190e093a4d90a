package extender

import (
	"slices"
	"testing"

	"k8s.io/client-go/tools/cache"

	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

// TestClusterGenerations feeds the cluster view events as the informers
// deliver them and checks, after each, the node's pods and that its
// generation changed exactly when the node or its pods did.
func TestClusterGenerations(t *testing.T) {
	c := newCluster()
	node := gt.MakeGPUNode("n").GFD(a100, 2, 81920).Obj()
	boundP := bound("p", "n", []int{0}, 1000, 0)
	q := gt.MakeGPUPod("q").Milli(100).Obj()
	heldQ := bound("q", "n", []int{1}, 100, 0)
	informedQ := heldQ.DeepCopy()
	informedQ.ResourceVersion = "7"
	other := bound("o", "other", []int{0}, 1000, 0)

	for _, step := range []struct {
		name string
		do   func()
		// wantPods are the node's pods by name; nil state: want nil.
		wantPods    []string
		wantChanged bool
		wantNoState bool
	}{
		{"a pod bound to a node not listed yet", func() { c.onPod(boundP) }, []string{"p"}, true, false},
		{"the node", func() { c.onNode(node) }, []string{"p"}, true, false},
		{"an unbound pod changes nothing", func() { c.onPod(q) }, []string{"p"}, false, false},
		{"a pod on another node changes nothing here", func() { c.onPod(other) }, []string{"p"}, false, false},
		{"the extender holds a pod it binds", func() { c.Hold(heldQ) }, []string{"p", "q"}, true, false},
		{"a late, unbound version of the held pod changes nothing", func() { c.onPod(q) }, []string{"p", "q"}, false, false},
		{"the informer's bound pod replaces the held copy", func() { c.onPod(informedQ) }, []string{"p", "q"}, true, false},
		{"releasing the held copy once replaced changes nothing", func() { c.Release(heldQ) }, []string{"p", "q"}, false, false},
		{"a node update", func() { c.onNode(node.DeepCopy()) }, []string{"p", "q"}, true, false},
		{"a pod deleted", func() { c.onPodDelete(informedQ) }, []string{"p"}, true, false},
		{"a tombstone", func() { c.onPodDelete(cache.DeletedFinalStateUnknown{Key: "default/p", Obj: boundP}) }, nil, true, false},
		{"the node deleted", func() { c.onNodeDelete(node) }, nil, true, true},
	} {
		before := c.Node("n")
		step.do()
		after := c.Node("n")
		if step.wantNoState {
			if after != nil {
				t.Fatalf("%s: state %+v, want none", step.name, after)
			}
			continue
		}
		var names []string
		for _, p := range after.Pods {
			names = append(names, p.Name)
		}
		if !slices.Equal(names, step.wantPods) {
			t.Errorf("%s: pods %v, want %v", step.name, names, step.wantPods)
		}
		if changed := before == nil || after.Generation != before.Generation; changed != step.wantChanged {
			t.Errorf("%s: generation changed %v, want %v", step.name, changed, step.wantChanged)
		}
		if before != nil && after != before && len(before.Pods) > 0 && len(after.Pods) > 0 && &before.Pods[0] == &after.Pods[0] {
			t.Errorf("%s: the new state shares its pod slice with the old, immutable one", step.name)
		}
	}
	if _, held := c.BoundPod(heldQ.UID); held {
		t.Error("a deleted pod is still bound")
	}
}

func TestClusterHold(t *testing.T) {
	c := newCluster()
	c.onNode(gt.MakeGPUNode("n").GFD(a100, 2, 81920).Obj())
	held := bound("p", "n", []int{0}, 1000, 0)
	if !c.Hold(held) {
		t.Fatal("Hold of a new pod refused")
	}
	if c.Hold(held.DeepCopy()) {
		t.Error("Hold of a pod already on the node accepted")
	}
	if got, ok := c.BoundPod(held.UID); !ok || got != held {
		t.Errorf("BoundPod = %v, %v", got, ok)
	}
	c.Release(held)
	if _, ok := c.BoundPod(held.UID); ok {
		t.Error("a released pod is still bound")
	}
	if pods := c.Node("n").Pods; len(pods) != 0 {
		t.Errorf("pods after release: %v", pods)
	}
	var s *NodeState
	for range s.PodSeq() {
		t.Error("a nil state yields pods")
	}
}

// TestClusterMaxima: the largest node capacities follow node changes,
// including a shrinking or deleted largest node, and survive pod changes,
// which copy a node's state without reading its Node again.
func TestClusterMaxima(t *testing.T) {
	c := newCluster()
	for _, step := range []struct {
		name     string
		do       func()
		wantCPU  int64 // milli-CPU
		wantGPUs int
	}{
		{"an 8-GPU node with 64 CPUs", func() { c.onNode(gt.MakeGPUNode("big").GFD(a100, 8, 81920).CPU("64").Obj()) }, 64000, 8},
		{"a smaller node", func() { c.onNode(gt.MakeGPUNode("small").GFD(a100, 2, 81920).CPU("16").Obj()) }, 64000, 8},
		{"a pod on the big node keeps its capacity", func() { c.onPod(bound("p", "big", []int{0}, 1000, 0)) }, 64000, 8},
		{"the big node shrinks", func() { c.onNode(gt.MakeGPUNode("big").GFD(a100, 4, 81920).CPU("32").Obj()) }, 32000, 4},
		{"the big node is deleted", func() { c.onNodeDelete(gt.MakeGPUNode("big").Obj()) }, 16000, 2},
	} {
		step.do()
		if m := c.maxima(); m.MilliCPU != step.wantCPU || m.GPUs != step.wantGPUs {
			t.Errorf("%s: maxima %d milli-CPU, %d GPUs; want %d, %d", step.name, m.MilliCPU, m.GPUs, step.wantCPU, step.wantGPUs)
		}
	}
}
