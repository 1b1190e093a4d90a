package policyservice

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpusched/gpusched/pkg/apis/config"
	"github.com/gpusched/gpusched/pkg/gpu"
)

// twoLayer is a model over builtin_score and free_gpu with a hidden layer of
// two ReLUs: h0 = relu(2·builtin − 1), h1 = relu(−builtin + 3·free_gpu),
// score = h0 − 0.5·h1 + 0.25.
const twoLayer = `{"format": "gpusched.io/model/v1",
 "columns": ["builtin_score", "free_gpu"],
 "layers": [
  {"weights": [[2, 0], [-1, 3]], "bias": [-1, 0], "activation": "relu"},
  {"weights": [[1, -0.5]], "bias": [0.25]}],
 "trained": {"note": "by hand"}}`

// row is a row of gpu.FeatureColumns with the named columns set.
func row(t *testing.T, values map[string]float32) []float32 {
	t.Helper()
	out := make([]float32, len(gpu.FeatureColumns()))
	for name, v := range values {
		i := indexOf(gpu.FeatureColumns(), name)
		if i < 0 {
			t.Fatalf("no feature column %q", name)
		}
		out[i] = v
	}
	return out
}

func indexOf(list []string, s string) int {
	for i, v := range list {
		if v == s {
			return i
		}
	}
	return -1
}

// TestModelScore: the score of a row is the network's output, with the
// arithmetic in each case's comment.
func TestModelScore(t *testing.T) {
	m, err := ParseModel([]byte(twoLayer))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name             string
		builtin, freeGPU float32
		want             float64
	}{
		// h0 = relu(2·1 − 1) = 1, h1 = relu(−1 + 0) = 0: 1 − 0 + 0.25.
		{"best builtin, no free GPU", 1, 0, 1.25},
		// h0 = relu(2·0.5 − 1) = 0, h1 = relu(−0.5 + 1.5) = 1: 0 − 0.5 + 0.25.
		{"half builtin, half free", 0.5, 0.5, -0.25},
		// h0 = relu(−1) = 0, h1 = relu(0 + 3) = 3: 0 − 1.5 + 0.25.
		{"worst builtin, all free", 0, 1, -1.25},
		// h0 = relu(2·0.75 − 1) = 0.5, h1 = relu(−0.75 + 0.75) = 0: 0.5 + 0.25.
		{"three quarters, a quarter free", 0.75, 0.25, 0.75},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := m.Score(row(t, map[string]float32{"builtin_score": tt.builtin, "free_gpu": tt.freeGPU}))
			if got != tt.want {
				t.Errorf("score %v, want %v", got, tt.want)
			}
		})
	}
}

// TestModelScoreWideLayers: hidden layers wider than the inputs and than
// each other (1 → 3 → 2 → 1), whose values pass through the scratch buffer
// in turn. With builtin_score b = 0.5:
//
//	h = relu(1·b, −1·b, 2·b + 1) = (0.5, 0, 2)
//	g = relu(h0 + h1 + h2, h2 − 3) = (2.5, 0)
//	score = 2·g0 − g1 + 0.5 = 5.5
//
// and with b = 0, scored next with the same scratch: h = (0, 0, 1),
// g = relu(1, −2) = (1, 0), score = 2 + 0.5 = 2.5.
func TestModelScoreWideLayers(t *testing.T) {
	m, err := ParseModel([]byte(`{"format": "gpusched.io/model/v1", "columns": ["builtin_score"], "layers": [
		{"weights": [[1], [-1], [2]], "bias": [0, 0, 1], "activation": "relu"},
		{"weights": [[1, 1, 1], [0, 0, 1]], "bias": [0, -3], "activation": "relu"},
		{"weights": [[2, -1]], "bias": [0.5]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	scores := m.ScoreFeatures([]gpu.NodeFeatures{{BuiltinScore: 0.5, Fits: true}, {BuiltinScore: 0, Fits: true}},
		&gpu.Demand{Count: 1, Milli: gpu.MilliPerGPU})
	if len(scores) != 2 || scores[0] != 5.5 || scores[1] != 2.5 {
		t.Errorf("scores %v, want [5.5 2.5]", scores)
	}
	if s := m.Score(row(t, map[string]float32{"builtin_score": 0.5})); s != 5.5 {
		t.Errorf("one row: score %v, want 5.5", s)
	}
}

// TestReLUOfNegativeZero: a pre-activation of −0 (bias −0 plus −1·0) is +0
// after the ReLU, as the Python package computes it.
func TestReLUOfNegativeZero(t *testing.T) {
	m, err := ParseModel([]byte(`{"format": "gpusched.io/model/v1", "columns": ["fits"],
		"layers": [{"weights": [[-1]], "bias": [-0.0], "activation": "relu"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if s := m.Score(row(t, nil)); s != 0 || math.Signbit(s) {
		t.Errorf("relu(−0) = %v (sign bit %v), want +0", s, math.Signbit(s))
	}
}

// TestParseModelErrors: a model that is not one is refused with the field,
// its value and what is allowed.
func TestParseModelErrors(t *testing.T) {
	linear := func(columns, weights, bias, activation string) string {
		return `{"format": "gpusched.io/model/v1", "columns": ` + columns + `, "layers": [{"weights": ` + weights +
			`, "bias": ` + bias + `, "activation": "` + activation + `"}]}`
	}
	tests := []struct{ name, model, want string }{
		{"not JSON", `{"format": `, "not a model: unexpected EOF"},
		{"unknown field", `{"format": "gpusched.io/model/v1", "colums": []}`, `not a model: json: unknown field "colums"`},
		{"format", `{"format": "onnx"}`, `format "onnx": want "gpusched.io/model/v1"`},
		{"trailing data", `{"format": "gpusched.io/model/v1"} {}`, "not a model: more data after the model's JSON object"},
		{"no columns", linear(`[]`, `[[1]]`, `[0]`, ""), "columns: empty; want one or more of builtin_score, fits,"},
		{"unknown column", linear(`["builtin_score", "gpu_temperature"]`, `[[1, 1]]`, `[0]`, ""),
			`columns[1] "gpu_temperature": not a feature column; want one of builtin_score, fits,`},
		{"no layers", `{"format": "gpusched.io/model/v1", "columns": ["fits"], "layers": []}`, "layers: empty; want one or more"},
		{"short row", linear(`["fits", "gpus"]`, `[[1]]`, `[0]`, ""), "layers[0].weights[0]: 1 weights; want 2, one per input"},
		{"bias length", linear(`["fits"]`, `[[1]]`, `[0, 1]`, ""), "layers[0].bias: 2 values; want 1, one per output"},
		{"activation", linear(`["fits"]`, `[[1]]`, `[0]`, "sigmoid"), `layers[0].activation "sigmoid": want one of linear, relu`},
		{"two outputs", linear(`["fits"]`, `[[1], [2]]`, `[0, 0]`, ""), "layers[0]: 2 outputs; the last layer must have one, the score"},
		{"chain", `{"format": "gpusched.io/model/v1", "columns": ["fits", "gpus"], "layers": [
			{"weights": [[1, 1], [1, 1], [1, 1]], "bias": [0, 0, 0]}, {"weights": [[1, 1]], "bias": [0]}]}`,
			"layers[1].weights[0]: 2 weights; want 3, one per input"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseModel([]byte(tt.model))
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("error %v, want it to start with %q", err, tt.want)
			}
		})
	}
}

// TestScorerWithModel: a Scorer configured with a model scores a request's
// feature matrix in-process, and a model file that cannot be used fails New
// with its path.
func TestScorerWithModel(t *testing.T) {
	path := filepath.Join(t.TempDir(), "model.json")
	if err := os.WriteFile(path, []byte(twoLayer), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := New(config.ExternalPolicy{Model: path, Timeout: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Source() != "model "+path {
		t.Errorf("source %q, want the model's path", s.Source())
	}
	nodes := []gpu.NodeFeatures{{Name: "a", BuiltinScore: 1, Fits: true}, {Name: "b", BuiltinScore: 0.75, Fits: true}}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "p"}}
	demand := &gpu.Demand{Count: 1, Milli: gpu.MilliPerGPU}
	scores, fb := s.ScoreNodes(context.Background(), pod, demand, nodes, gpu.DefaultPolicy)
	if fb != nil {
		t.Fatal(fb)
	}
	// Neither node has GPUs, so free_gpu is 0: a scores 2·1 − 1 + 0.25 =
	// 1.25, b scores 2·0.75 − 1 + 0.25 = 0.75.
	if len(scores) != 2 || scores[0] != 1.25 || scores[1] != 0.75 {
		t.Errorf("scores %v, want [1.25 0.75]", scores)
	}

	// A score past float64's range is a malformed answer, as from a
	// service: 1e308·1 + 1e308·0.75 overflows to +Inf.
	huge := filepath.Join(t.TempDir(), "huge.json")
	if err := os.WriteFile(huge, []byte(`{"format": "gpusched.io/model/v1", "columns": ["builtin_score", "fits"],
		"layers": [{"weights": [[1e308, 1e308]], "bias": [0]}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	hs, err := New(config.ExternalPolicy{Model: huge})
	if err != nil {
		t.Fatal(err)
	}
	if _, fb := hs.ScoreNodes(context.Background(), pod, demand, nodes, gpu.DefaultPolicy); fb == nil || fb.Cause != CauseMalformed || !strings.Contains(fb.Error(), `the model scores node "a" +Inf: want a finite number`) {
		t.Errorf("an overflowing model: fallback %v, want malformed naming node a", fb)
	}

	if err := os.WriteFile(path, []byte(`{"format": "gpusched.io/model/v2"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := New(config.ExternalPolicy{Model: path}); err == nil || !strings.Contains(err.Error(), path+`: format "gpusched.io/model/v2"`) {
		t.Errorf("New with a model of another format: %v, want the path and the format", err)
	}
	if _, err := New(config.ExternalPolicy{Model: path + ".missing"}); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("New with a missing model: %v, want no such file", err)
	}
}
