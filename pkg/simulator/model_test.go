package simulator

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/internal/pythontest"
	"github.com/gpusched/gpusched/pkg/policyservice"
	"github.com/gpusched/gpusched/pkg/trace"
)

// crossCheckModel is a model with a hidden ReLU layer over columns whose
// values vary from step to step, so that its scores order the nodes
// differently from PairFit's alone.
const crossCheckModel = `{"format": "gpusched.io/model/v1",
 "columns": ["builtin_score", "free_gpu_after", "partial_gpus_after", "fragment_delta", "free_cpu_after"],
 "layers": [
  {"weights": [[1.5, -0.3, 0.2, -0.7, 0.1], [-0.4, 0.9, -1.1, 0.3, 0.6], [0.25, 0.5, 0.75, -1, -0.5]],
   "bias": [0.1, -0.05, 0.2], "activation": "relu"},
  {"weights": [[1, -0.35, 0.45]], "bias": [0]}]}`

// externalModelConfig is the default simulation config with GPUPlacement
// scoring by the model file at path (scoringStrategy External,
// external.model).
func externalModelConfig(t *testing.T, model string) string {
	t.Helper()
	dir := t.TempDir()
	modelPath := filepath.Join(dir, "model.json")
	if err := os.WriteFile(modelPath, []byte(model), 0o644); err != nil {
		t.Fatal(err)
	}
	base, err := os.ReadFile("default-config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	yaml := strings.Replace(string(base), "      scoringStrategy:\n        type: PairFit\n", fmt.Sprintf(
		"      external:\n        model: %q\n        fallback: PairFit\n      scoringStrategy:\n        type: External\n", modelPath), 1)
	if yaml == string(base) {
		t.Fatal("default-config.yaml no longer sets type: PairFit where this test expects it")
	}
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestModelDecidesAlikeInGoAndPython: a model the scheduler evaluates
// itself (external.model) and the same file evaluated by the Python package
// (gpusched_policy.model) score every node of every recorded observation
// identically, bit for bit, so they choose the same node; and the node the
// scheduler chooses with the model is one the model scores highest.
func TestModelDecidesAlikeInGoAndPython(t *testing.T) {
	python := pythontest.Python(t, "numpy")
	cfg, err := LoadConfig(externalModelConfig(t, crossCheckModel))
	if err != nil {
		t.Fatal(err)
	}
	profiles, err := ProfilesFor(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	model, err := policyservice.ParseModel([]byte(crossCheckModel))
	if err != nil {
		t.Fatal(err)
	}
	nodes, pods := trace.Synthetic(trace.SyntheticOptions{Nodes: 24})
	env, err := NewEnv(EnvOptions{Nodes: nodes, Pods: pods, Profile: profiles[0], Arrival: trace.ArrivalFGD})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()

	// Record the episode the scheduler runs with the model: every
	// observation's allowed rows, and Go's scores of them.
	ctx := context.Background()
	seed := int64(3)
	reset, err := env.Reset(ctx, &seed)
	if err != nil {
		t.Fatal(err)
	}
	var recorded bytes.Buffer
	var goScores []float64
	var columns []string
	obs, steps, differentFromPairFit := reset.Observation, 0, 0
	for {
		m := obs.GetNodes()
		columns = m.GetColumns()
		width := len(columns)
		var allowed []int
		best := math.Inf(-1)
		for i := range int(m.GetRows()) {
			if obs.ActionMask[i] == 0 {
				continue
			}
			row := make([]float32, width)
			for c := range row {
				row[c] = math.Float32frombits(binary.LittleEndian.Uint32(m.Values[4*(i*width+c):]))
			}
			recorded.Write(m.Values[4*i*width : 4*(i+1)*width])
			s := model.Score(row)
			goScores = append(goScores, s)
			allowed = append(allowed, i)
			best = max(best, s)
		}
		chosen := int(obs.BuiltinAction)
		if s := goScores[len(goScores)-len(allowed)+slices.Index(allowed, chosen)]; s != best {
			t.Fatalf("step %d: the scheduler chose node %d, scored %v by the model; the best score is %v", steps, chosen, s, best)
		}
		if featureValue(m, chosen, slices.Index(columns, "builtin_score")) != 1 {
			differentFromPairFit++
		}
		reply, err := env.Step(ctx, obs.BuiltinAction)
		if err != nil {
			t.Fatalf("step %d: %v", steps, err)
		}
		steps++
		if reply.Terminated {
			break
		}
		obs = reply.Observation
	}
	if differentFromPairFit == 0 {
		t.Fatalf("in %d steps the model always chose one of PairFit's best nodes: the check cannot tell the model from PairFit", steps)
	}

	dir := t.TempDir()
	modelPath, matrixPath := filepath.Join(dir, "model.json"), filepath.Join(dir, "rows.f32")
	if err := os.WriteFile(modelPath, []byte(crossCheckModel), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(matrixPath, recorded.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python, "-m", "gpusched_policy.model", modelPath, matrixPath, strings.Join(columns, ","))
	cmd.Dir = filepath.Join("..", "..", "python")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, stderr.Bytes())
	}
	lines := strings.Fields(string(out))
	if len(lines) != len(goScores) {
		t.Fatalf("Python scored %d rows, Go %d", len(lines), len(goScores))
	}
	for i, line := range lines {
		v, err := strconv.ParseFloat(line, 64)
		if err != nil {
			t.Fatalf("Python's score %d: %v", i, err)
		}
		if v != goScores[i] {
			t.Fatalf("row %d of %d: Python scores %v, Go %v", i, len(lines), v, goScores[i])
		}
	}
	t.Logf("%d steps, %d rows scored alike, %d choices not among PairFit's best", steps, len(lines), differentFromPairFit)
}
