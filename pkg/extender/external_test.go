package extender

import (
	"context"
	"errors"
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpusched/gpusched/pkg/apis/config/load"
	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/pkg/policyservice/policyservicetest"
	pb "github.com/gpusched/gpusched/pkg/policyservice/v1alpha1"
)

// TestExternalPolicyExtender: the extender's Prioritize asks the policy
// service as GPUPlacement does. Its scores, min-max to 0..10, replace
// BestFit's on the nodes the pod fits on; a failing service or Shadow mode
// leaves BestFit's scores exactly (n-a 7, n-b 2, n-c 10, cpu-0 0: the
// arithmetic of TestPrioritize's case with cpu-0), and a node the pod does
// not fit scores 0 and is not sent.
func TestExternalPolicyExtender(t *testing.T) {
	nodes := []*v1.Node{
		gt.MakeGPUNode("n-a").GFD(a100, 8, 81920).Obj(),
		gt.MakeGPUNode("n-b").GFD(a100, 8, 81920).Obj(),
		gt.MakeGPUNode("n-c").GFD(t4, 4, 15360).Obj(),
		gt.MakeGPUNode("cpu-0").Obj(),
	}
	pods := []*v1.Pod{bound("a-w", "n-a", []int{0, 1}, 1000, 0), bound("c-w", "n-c", []int{0}, 1000, 0)}
	failing := func(context.Context, *pb.ScoreRequest) (*pb.ScoreReply, error) { return nil, errors.New("no model") }
	builtin := map[string]int64{"n-a": 7, "n-b": 2, "n-c": 10, "cpu-0": 0}
	tests := []struct {
		name   string
		answer policyservicetest.Answer
		mode   string
		want   map[string]int64
	}{
		{"enforce", policyservicetest.Prefer("n-b"), "Enforce", map[string]int64{"n-a": 0, "n-b": 10, "n-c": 0, "cpu-0": 0}},
		{"failing service", failing, "Enforce", builtin},
		{"shadow", policyservicetest.Prefer("n-b"), "Shadow", builtin},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := policyservicetest.Start(t, tt.answer)
			args, err := load.GPUPlacementArgsFromYAML([]byte(fmt.Sprintf(
				"scoringStrategy:\n  type: External\nexternal:\n  endpoint: %q\n  fallback: BestFit\n  mode: %s\n  timeout: 2s\n", srv.Addr, tt.mode)))
			if err != nil {
				t.Fatal(err)
			}
			policy, err := args.NewPolicy()
			if err != nil {
				t.Fatal(err)
			}
			if policy.Type() != gpu.PolicyBestFit {
				t.Fatalf("External's engine policy is %s, want its fallback BestFit", policy.Type())
			}
			te := newTestExtender(t, policy, nodes, pods)
			if err := te.ext.UseExternal(args); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { te.ext.Close() })
			var got extenderv1.HostPriorityList
			call(t, te.handler, VerbPrioritize, namesArgs(gt.MakeGPUPod("p").GPUs(1).Obj(), "n-a", "n-b", "n-c", "cpu-0"), &got)
			for _, hp := range got {
				if hp.Score != tt.want[hp.Host] {
					t.Errorf("%s scored %d, want %d (all: %v)", hp.Host, hp.Score, tt.want[hp.Host], got)
				}
			}
			if srv.Calls.Load() != 1 {
				t.Fatalf("%d calls to the service, want 1", srv.Calls.Load())
			}
			if n := len(srv.Last().Nodes); n != 3 {
				t.Errorf("the service was asked about %d nodes, want the 3 the pod fits on", n)
			}
		})
	}
}
