package gputelemetry

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/pkg/plugins/internal/gpuledger"
)

// demandLedger is a cycle's ledger that says only the pod's demand.
type demandLedger struct {
	gpuledger.Ledger
	demand *gpu.Demand
}

func (l demandLedger) Demand(fwk.CycleState) (*gpu.Demand, bool) { return l.demand, l.demand != nil }

// TestCycleDemand: the plugin takes the pod's demand from GPUPlacement's
// PreFilter when it ran in the cycle (the pod below asks for 2 GPUs, the
// cycle says 3, or nothing), and reads the pod only when it did not.
func TestCycleDemand(t *testing.T) {
	pod := gt.MakeGPUPod("p").GPUs(2).Obj()
	bad := gt.MakeGPUPod("bad").Annotation(gpu.AnnotationMilli, "half").Obj()
	tests := []struct {
		name   string
		ledger *demandLedger
		pod    *v1.Pod
		count  int
		ok     bool
	}{
		{"no GPUPlacement in the cycle: the pod's", nil, pod, 2, true},
		{"no GPUPlacement, malformed", nil, bad, 0, false},
		{"GPUPlacement's reading", &demandLedger{demand: &gpu.Demand{Count: 3, Milli: gpu.MilliPerGPU}}, pod, 3, true},
		{"GPUPlacement skipped the pod", &demandLedger{}, pod, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			state := framework.NewCycleState()
			if tt.ledger != nil {
				gpuledger.Write(state, *tt.ledger)
			}
			d, ok := cycleDemand(state, tt.pod)
			if ok != tt.ok || (ok && d.Count != tt.count) {
				t.Errorf("cycleDemand = %d GPUs, %t; want %d, %t", d.Count, ok, tt.count, tt.ok)
			}
		})
	}
}
