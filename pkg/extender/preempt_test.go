package extender

import (
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

// TestPreemptFreesOneDevice: the preempt verb answers with the victims
// GPUPreemption would choose (gpu.ChooseVictims over the scheduler's victims
// and the node's other lower-priority pods), whatever the scheduler
// proposed from its view of CPU, memory and GPU counts.
func TestPreemptFreesOneDevice(t *testing.T) {
	withPriority := func(p *v1.Pod, priority int32) *v1.Pod {
		p.Spec.Priority = &priority
		return p
	}
	// p-0: GPU 0 holds a (priority 0); GPU 1 holds b and c, halves (0).
	// p-1: GPU 0 holds s1 and s2, 400 milli each (0); GPU 1 holds w (5).
	a, b, c := bound("a", "p-0", []int{0}, 1000, 0), bound("b", "p-0", []int{1}, 500, 0), bound("c", "p-0", []int{1}, 500, 0)
	s1, s2 := bound("s1", "p-1", []int{0}, 400, 0), bound("s2", "p-1", []int{0}, 400, 0)
	w := withPriority(bound("w", "p-1", []int{1}, 1000, 0), 5)
	nodes := []*v1.Node{gt.MakeGPUNode("p-0").GFD(a100, 2, 81920).Obj(), gt.MakeGPUNode("p-1").GFD(a100, 2, 81920).Obj()}
	te := newTestExtender(t, nil, nodes, []*v1.Pod{a, b, c, s1, s2, w})
	urgent := withPriority(gt.MakeGPUPod("urgent").GPUs(1).Obj(), 10)
	meta := func(pods ...*v1.Pod) *extenderv1.MetaVictims {
		mv := &extenderv1.MetaVictims{NumPDBViolations: 0}
		for _, p := range pods {
			mv.Pods = append(mv.Pods, &extenderv1.MetaPod{UID: string(p.UID)})
		}
		return mv
	}

	for _, tc := range []struct {
		name     string
		node     string
		proposed *extenderv1.MetaVictims
		want     []*v1.Pod
	}{{
		// a and b free half of each GPU's holders: no GPU. GPU 0 costs
		// {priority 0, 1 pod}, GPU 1 {0, 2 pods}: a alone.
		name: "victims scattered over two GPUs become one GPU's holder",
		node: "p-0", proposed: meta(a, b), want: []*v1.Pod{a},
	}, {
		// s1 frees 400 milli of GPU 0, no whole GPU. GPU 0 costs {priority
		// 0, 2 pods}, GPU 1 {priority 5, 1 pod}: the lower priority wins.
		name: "a victim that frees no GPU is completed with its GPU's other holder",
		node: "p-1", proposed: meta(s1), want: []*v1.Pod{s1, s2},
	}, {
		name: "the scheduler's victim that was the cheapest stays",
		node: "p-0", proposed: meta(a), want: []*v1.Pod{a},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var got extenderv1.ExtenderPreemptionResult
			args := &extenderv1.ExtenderPreemptionArgs{Pod: urgent, NodeNameToMetaVictims: map[string]*extenderv1.MetaVictims{tc.node: tc.proposed}}
			call(t, te.handler, VerbPreempt, args, &got)
			v := got.NodeNameToMetaVictims[tc.node]
			if v == nil {
				t.Fatalf("node %s dropped", tc.node)
			}
			var uids, want []string
			for _, p := range v.Pods {
				uids = append(uids, p.UID)
			}
			for _, p := range tc.want {
				want = append(want, string(p.UID))
			}
			slices.Sort(uids)
			slices.Sort(want)
			if !slices.Equal(uids, want) {
				t.Errorf("victims %v, want %v", uids, want)
			}
		})
	}
}
