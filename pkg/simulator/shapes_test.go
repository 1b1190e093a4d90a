package simulator

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpusched/gpusched/pkg/plugins/gpuplacement"
	"github.com/gpusched/gpusched/pkg/simulator/report"
	"github.com/gpusched/gpusched/pkg/trace"
)

// TestRunMeasuresAgainstTheWorkloadsTypicalPods: a run's GPUPlacement and
// its migration planner measure fragmentation against the workload's
// typical pods exactly as gpu.TypicalPods cuts them, once, for every policy
// that measures it.
//
// The workload is 100 pods of four shapes: 60 one-GPU pods (4 CPUs), 34
// half shares (2 CPUs), 3 two-GPU pods (8 CPUs) and 3 CPU-only pods (1 CPU).
// The cut keeps the heaviest shapes until they cover 95 % of the pods: 60,
// then 94, then 97 ≥ 95 (of the two shapes of 3 pods the larger, the
// two-GPU pod, comes first), so three shapes weighing 60/97, 34/97 and
// 3/97. Cutting those again, as reading them back as configured typical
// pods would, keeps two: 60 + 34 = 94 ≥ 0.95 × 97 = 92.15.
func TestRunMeasuresAgainstTheWorkloadsTypicalPods(t *testing.T) {
	nodes, _ := trace.Synthetic(trace.SyntheticOptions{Nodes: 4})
	var pods []trace.Pod
	add := func(n int, milliCPU int64, gpus int, milli int64) {
		for range n {
			name := fmt.Sprintf("p%03d", len(pods))
			pods = append(pods, trace.Pod{Pod: trace.NewPod(name, milliCPU, 1024, gpus, milli, nil)})
		}
	}
	add(60, 4000, 1, 1000)
	add(34, 2000, 1, 500)
	add(3, 8000, 2, 1000)
	add(3, 1000, 0, 0)
	typical := typicalPods(pods)
	if len(typical) != 3 {
		t.Fatalf("the workload has %d typical pods, want 3: %+v", len(typical), typical)
	}

	for _, policy := range []string{"PairFit", "FGD", "FragFit"} {
		t.Run(policy, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			registry, err := runRegistry(nil, &replayClock{}, typical)
			if err != nil {
				t.Fatal(err)
			}
			var placement *gpuplacement.GPUPlacement
			factory := registry[gpuplacement.Name]
			registry[gpuplacement.Name] = func(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
				p, err := factory(ctx, obj, h)
				if err == nil {
					placement = p.(*gpuplacement.GPUPlacement)
				}
				return p, err
			}
			if _, err := newScheduler(ctx, registry, defaultProfiles(t, policy)[0], nodes, 1, 1, report.TieBreakRandom, nil); err != nil {
				t.Fatal(err)
			}
			if placement == nil {
				t.Fatal("the profile built no GPUPlacement")
			}
			if got := placement.TypicalPods(); !reflect.DeepEqual(got, typical) {
				t.Errorf("GPUPlacement measures against %d shapes %+v, want the workload's %d %+v", len(got), got, len(typical), typical)
			}

			// The migration planner places with the same policy.
			profiles, err := withMigrations(defaultProfiles(t, policy), "1%")
			if err != nil {
				t.Fatal(err)
			}
			m, err := newRunMigrator(profiles[1], nodes, typical)
			if err != nil {
				t.Fatal(err)
			}
			if got := m.planner.Policy.Shapes().Typical(); !reflect.DeepEqual(got, typical) {
				t.Errorf("the migration planner measures against %d shapes %+v, want the workload's %d", len(got), got, len(typical))
			}
		})
	}
}
