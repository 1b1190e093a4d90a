package gpugang

import (
	"context"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/gpusched/gpusched/pkg/gang"
	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/pkg/plugins/internal/dragpus"
	"github.com/gpusched/gpusched/pkg/plugins/internal/gpuledger"
	"github.com/gpusched/gpusched/pkg/podgroup"
)

// fakeLedger is GPUPlacement's ledger as the gang check reads it: each
// node's view, and what each pod holds.
type fakeLedger struct {
	views map[string]*gpu.NodeGPUs
	held  map[string]gpu.Assignment // by pod name
}

func (l fakeLedger) NodeView(ni fwk.NodeInfo) *gpu.NodeGPUs { return l.views[ni.Node().Name] }
func (l fakeLedger) Held(pod *v1.Pod) (gpu.Assignment, bool) {
	a, ok := l.held[pod.Name]
	return a, ok
}
func (fakeLedger) PreemptionView(fwk.CycleState, fwk.NodeInfo) (*gpu.NodeGPUs, *gpu.Request, bool) {
	return nil, nil, false
}
func (fakeLedger) Demand(fwk.CycleState) (*gpu.Demand, bool) { return nil, false }

// TestFitAfterEviction: GPUPreemption's gang check places the unplaced
// members where GPUGang's PreFilter would, each node's GPUs as they would
// be after the evictions. Node dp has 4 T4s of the device plugin, 2 held
// by pod low-dp (priority low) and 1 by pod high-dp; node dra has 4 A100s
// a DRA driver publishes, 2 of them allocated to a claim of pod low-dra.
// Members are 2 pods of the gang g (minMember 2) asking for 2 GPUs each.
func TestFitAfterEviction(t *testing.T) {
	dp := gt.MakeGPUNode("dp").GFD(t4, 4, 15360).Obj()
	dpView := gpu.NewLedger().Node(dp, 1, slices.Values([]*v1.Pod(nil)))
	lowDP := gpu.Assignment{Node: "dp", Devices: []int{0, 1}, Milli: gpu.MilliPerGPU}
	highDP := gpu.Assignment{Node: "dp", Devices: []int{2}, Milli: gpu.MilliPerGPU}
	dpView = dpView.With(&lowDP).With(&highDP)
	draView := gt.EmptyDRAView("dra", a100, 4)
	draView = draView.With(&gpu.Assignment{Node: "dra", Devices: []int{0, 1}, Milli: gpu.MilliPerGPU})
	ledger := fakeLedger{
		views: map[string]*gpu.NodeGPUs{"dp": dpView},
		held:  map[string]gpu.Assignment{"low-dp": lowDP, "high-dp": highDP},
	}
	nodeInfo := func(n *v1.Node, pods ...string) fwk.NodeInfo {
		ni := framework.NewNodeInfo()
		ni.SetNode(n)
		for _, name := range pods {
			ni.AddPod(gt.MakeGPUPod(name).UID(name).Node(n.Name).Obj())
		}
		return ni
	}
	nodes := []fwk.NodeInfo{nodeInfo(dp, "low-dp", "high-dp"), nodeInfo(gt.MakeGPUNode("dra").Obj(), "low-dra")}
	whole := func(name string) *v1.Pod { return gt.MakeGPUPod(name).UID(name).GPUs(2).Obj() }
	lowOnly := func(p *v1.Pod) bool { return strings.HasPrefix(p.Name, "low-") }
	none := func(*v1.Pod) bool { return false }
	tests := []struct {
		name    string
		dra     dragpus.GPUs
		members []*v1.Pod
		evicted func(*v1.Pod) bool
		fits    bool
	}{
		// dp has 1 T4 free; without low-dp, 3: one member of 2 GPUs, not
		// two. dra's A100s take no nvidia.com/gpu here.
		{"whole GPUs, no eviction", withoutGPUResource{fakeDRA{"dra": draView}}, []*v1.Pod{whole("a"), whole("b")}, none, false},
		{"whole GPUs, low-dp evicted: 3 T4s for 2 members of 2", withoutGPUResource{fakeDRA{"dra": draView}}, []*v1.Pod{whole("a"), whole("b")}, lowOnly, false},
		// Where DRA serves nvidia.com/gpu, dra's 2 free A100s take the
		// second member.
		{"whole GPUs, low-dp evicted, DRA serves nvidia.com/gpu", fakeDRA{"dra": draView}, []*v1.Pod{whole("a"), whole("b")}, lowOnly, true},
		// Claims go only to DRA devices: dra has 2 free A100s, room for one
		// member. Evicting low-dra frees none of them, as the scheduler's
		// preemption counts it (DynamicResources has no PreFilterExtensions);
		// dp's T4s, however many are freed, take no claim.
		{"claims, low pods evicted", fakeDRA{"dra": draView}, []*v1.Pod{claimPod("a", "xx"), claimPod("b", "xx")}, lowOnly, false},
		// One claim fits the 2 free A100s.
		{"one claim of two GPUs and a claim of none", fakeDRA{"dra": draView}, []*v1.Pod{claimPod("a", "xx"), claimPod("b", "")}, none, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pods := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{groupIndex: groupOfObject})
			for _, m := range tt.members {
				m.Labels = map[string]string{podgroup.LabelPodGroup: "g"}
				if err := pods.Add(m); err != nil {
					t.Fatal(err)
				}
			}
			p := &GPUGang{pods: pods, reservations: gang.NewReservations()}
			state := framework.NewCycleState()
			state.Write(stateKey, &gangState{key: "default/g", minMember: 2})
			state.Write(dragpus.StateKey, tt.dra)
			gpuledger.Write(state, ledger)
			key, needed, reason, ok := p.FitAfterEviction(context.Background(), state, nodes, tt.evicted)
			if !ok || key != "default/g" || needed != 2 || (reason == "") != tt.fits {
				t.Errorf("got %q needed %d reason %q ok %t; want default/g, 2, fits %t", key, needed, reason, ok, tt.fits)
			}
		})
	}
	// A pod outside a gang, or a profile without GPUPlacement's ledger:
	// no answer, and preemption goes ahead as DefaultPreemption's.
	p := &GPUGang{reservations: gang.NewReservations()}
	if _, _, _, ok := p.FitAfterEviction(context.Background(), framework.NewCycleState(), nodes, none); ok {
		t.Error("pod outside a gang: ok")
	}
}
