package gpupreemption

import (
	"iter"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/pkg/plugins/internal/gpuledger"
)

const a100 = "NVIDIA-A100-SXM4-80GB"

// testLedger is a gpuledger.Ledger over the engine's own ledger, as
// GPUPlacement's is, for a cycle whose pod asks for demand.
type testLedger struct {
	ledger *gpu.Ledger
	demand gpu.Demand
}

func (l *testLedger) NodeView(ni fwk.NodeInfo) *gpu.NodeGPUs {
	return l.ledger.Node(ni.Node(), ni.GetGeneration(), podsOn(ni))
}

func (l *testLedger) Held(pod *v1.Pod) (gpu.Assignment, bool) { return gpu.AssignmentOf(pod) }

func (l *testLedger) PreemptionView(_ fwk.CycleState, ni fwk.NodeInfo) (*gpu.NodeGPUs, *gpu.Request, bool) {
	if l.demand.IsZero() {
		return nil, nil, false
	}
	return l.NodeView(ni), &gpu.Request{Demand: &l.demand}, true
}

func (l *testLedger) Demand(fwk.CycleState) (*gpu.Demand, bool) { return &l.demand, true }

func podsOn(ni fwk.NodeInfo) iter.Seq[*v1.Pod] {
	return func(yield func(*v1.Pod) bool) {
		for _, pi := range ni.GetPods() {
			if !yield(pi.GetPod()) {
				return
			}
		}
	}
}

// onGPU is a pod of priority holding GPU device of node n whole.
func onGPU(name, node string, device int, priority int32) *v1.Pod {
	p := gt.MakeGPUPod(name).GPUs(1).Priority(priority).Node(node).
		Assigned(gpu.Assignment{Node: node, Devices: []int{device}, Milli: gpu.MilliPerGPU}).Obj()
	p.UID = types.UID("uid-" + p.Name)
	return p
}

func podInfo(t *testing.T, pod *v1.Pod) fwk.PodInfo {
	t.Helper()
	pi, err := framework.NewPodInfo(pod)
	if err != nil {
		t.Fatal(err)
	}
	return pi
}

// TestPropose: the engine's cheapest units whose GPUs let the preemptor fit
// node n (4 A100s), from what the cycle's ledger says they hold. Every GPU
// is held: low-a (priority 0) GPU 0, low-b (priority 1) GPU 1, mid
// (priority 5) GPU 2, and a gang of priority 0 whose pod g-0 holds GPU 3
// and whose pod g-1 is on another node (two pods evicted together). Costs
// compare the highest priority evicted, then the pods evicted.
func TestPropose(t *testing.T) {
	node := gt.MakeGPUNode("n").GFD(a100, 4, 81920).Obj()
	lowA, lowB, mid := onGPU("low-a", "n", 0, 0), onGPU("low-b", "n", 1, 1), onGPU("mid", "n", 2, 5)
	g0, g1 := onGPU("g-0", "n", 3, 0), onGPU("g-1", "m", 0, 0)
	ni := framework.NewNodeInfo(lowA, lowB, mid, g0)
	ni.SetNode(node)
	units := []*unit{
		{pods: []fwk.PodInfo{podInfo(t, lowA)}, priority: 0},
		{pods: []fwk.PodInfo{podInfo(t, lowB)}, priority: 1},
		{pods: []fwk.PodInfo{podInfo(t, mid)}, priority: 5},
		{pods: []fwk.PodInfo{podInfo(t, g0), podInfo(t, g1)}, priority: 0, keyType: fwk.PodGroupKeyType},
	}
	names := []string{"low-a", "low-b", "mid", "gang"}
	tests := []struct {
		name   string
		ledger bool
		gpus   int
		want   []string // nil: no proposal
	}{
		// One GPU: low-a alone costs (priority 0, 1 pod); the gang
		// (0, 2 pods), low-b (1, 1) and mid (5, 1) cost more.
		{"one GPU", true, 1, []string{"low-a"}},
		// Two GPUs: low-a + gang costs (0, 3 pods), cheaper than low-a +
		// low-b (1, 2 pods): a higher priority weighs more than more pods.
		{"two GPUs", true, 2, []string{"low-a", "gang"}},
		// Three GPUs: low-a + gang + low-b (1, 4 pods) against any set
		// with mid (5, ...).
		{"three GPUs", true, 3, []string{"low-a", "low-b", "gang"}},
		// Four GPUs: every unit.
		{"four GPUs", true, 4, []string{"low-a", "low-b", "mid", "gang"}},
		// Five GPUs: the node has four; no set helps.
		{"five GPUs", true, 5, nil},
		// A pod without GPUs: the ledger has nothing to propose.
		{"no GPU", true, 0, nil},
		// A profile without GPUPlacement: no ledger in the cycle.
		{"no ledger", false, 1, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			state := framework.NewCycleState()
			if tt.ledger {
				gpuledger.Write(state, &testLedger{ledger: gpu.NewLedger(), demand: gpu.Demand{Count: tt.gpus, Milli: gpu.MilliPerGPU}})
			}
			proposed := (&GPUPreemption{}).propose(state, ni, units)
			var got []string
			for i, u := range units {
				if proposed[u] {
					got = append(got, names[i])
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("proposed %v, want %v", got, tt.want)
			}
		})
	}
}

// TestGangUnit: a gang's bound pods go as one unit with the highest
// priority of its pods and the earliest start; a pod on the node keeps the
// node's own PodInfo, so that removing and adding it back leaves the node
// as it was.
func TestGangUnit(t *testing.T) {
	early, late := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), metav1.NewTime(time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC))
	local, remote := onGPU("g-0", "n", 0, 1), onGPU("g-1", "m", 0, 7)
	local.Status.StartTime, remote.Status.StartTime = &late, &early
	ni := framework.NewNodeInfo(local)
	ni.SetNode(gt.MakeGPUNode("n").GFD(a100, 4, 81920).Obj())
	u := gangUnit(ni, []*v1.Pod{local, remote})
	if u.priority != 7 {
		t.Errorf("priority %d, want 7, the highest of 1 and 7", u.priority)
	}
	if u.start == nil || !u.start.Equal(&early) {
		t.Errorf("start %v, want the earlier %v", u.start, early)
	}
	if len(u.pods) != 2 || u.pods[0] != ni.GetPods()[0] {
		t.Errorf("pods %v: want 2, the local one the node's own PodInfo", u.pods)
	}
	if !u.IsGroup() || u.Type() != fwk.PodGroupKeyType {
		t.Errorf("unit type %v, want a pod group", u.Type())
	}
}

// TestDefaultArgs: the plugin runs DefaultPreemption with the args the
// kube-scheduler gives a profile that sets none: in 1.37, dry-run
// preemption on 10 % of the nodes and at least 100. A change upstream
// shows here.
func TestDefaultArgs(t *testing.T) {
	args, err := defaultArgs()
	if err != nil {
		t.Fatal(err)
	}
	if args.MinCandidateNodesPercentage != 10 || args.MinCandidateNodesAbsolute != 100 {
		t.Errorf("args %+v, want 10 %% and at least 100 nodes", args)
	}
}
