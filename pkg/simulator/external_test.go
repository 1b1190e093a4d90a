package simulator

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/pkg/policyservice/policyservicetest"
	pb "github.com/gpusched/gpusched/pkg/policyservice/v1alpha1"
	"github.com/gpusched/gpusched/pkg/simulator/report"
	"github.com/gpusched/gpusched/pkg/trace"
)

// echoBuiltin answers each node's builtin_score times sign, read from the
// request's feature matrix as a scorer trained in the environment reads it.
func echoBuiltin(sign float64) policyservicetest.Answer {
	return func(_ context.Context, req *pb.ScoreRequest) (*pb.ScoreReply, error) {
		m := req.GetFeatures()
		cols, col := len(m.GetColumns()), slices.Index(m.GetColumns(), "builtin_score")
		reply := &pb.ScoreReply{}
		for i, n := range req.Nodes {
			v := math.Float32frombits(binary.LittleEndian.Uint32(m.Values[4*(i*cols+col):]))
			reply.Scores = append(reply.Scores, &pb.NodeScore{Node: n.Name, Score: sign * float64(v)})
		}
		return reply, nil
	}
}

// TestExternalPolicyInSimulator: the simulator takes the External strategy
// as the scheduler does and places by the service's scores. A service that
// answers the fallback's own scores (PairFit's, the default config's)
// reproduces a PairFit run exactly; one that
// answers their opposite (the worst node first) places differently and
// leaves more unallocated.
func TestExternalPolicyInSimulator(t *testing.T) {
	nodes, pods := trace.Synthetic(trace.SyntheticOptions{Nodes: 40})
	same := policyservicetest.Start(t, echoBuiltin(1))
	opposite := policyservicetest.Start(t, echoBuiltin(-1))
	base, err := os.ReadFile("default-config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	config := func(name, endpoint string) string {
		path := filepath.Join(t.TempDir(), name+".yaml")
		yaml := strings.Replace(string(base), "      scoringStrategy:\n        type: PairFit\n", fmt.Sprintf(
			"      external:\n        endpoint: %q\n        fallback: PairFit\n        timeout: 5s\n      scoringStrategy:\n        type: External\n", endpoint), 1)
		if yaml == string(base) {
			t.Fatal("default-config.yaml no longer sets type: PairFit where this test expects it")
		}
		if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	run := func(path string) report.Run {
		t.Helper()
		cfg, err := LoadConfig(path)
		if err != nil {
			t.Fatal(err)
		}
		profiles, err := ProfilesFor(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		runs, err := Simulate(context.Background(), Options{Nodes: nodes, Pods: pods, Profiles: profiles[:1], Seeds: []int64{7},
			Arrival: trace.ArrivalFGD, RecordPlacements: true})
		if err != nil {
			t.Fatal(err)
		}
		return runs[0]
	}
	pairFit := run("")
	agree := run(config("same", same.Addr))
	disagree := run(config("opposite", opposite.Addr))
	if same.Calls.Load() == 0 || opposite.Calls.Load() == 0 {
		t.Fatalf("the services were asked %d and %d times", same.Calls.Load(), opposite.Calls.Load())
	}
	if !reflect.DeepEqual(agree.Placements, pairFit.Placements) || len(agree.Placements) == 0 {
		t.Error("a service answering PairFit's scores placed pods differently from PairFit")
	}
	if *disagree.UnallocatedPctAt100 <= *pairFit.UnallocatedPctAt100 {
		t.Errorf("the worst node first left %.2f%% unallocated, PairFit %.2f%%: want more", *disagree.UnallocatedPctAt100, *pairFit.UnallocatedPctAt100)
	}
}
