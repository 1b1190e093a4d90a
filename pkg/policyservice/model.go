package policyservice

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// ModelFormat is the value of a model file's "format" field: a small
// feed-forward network over the feature columns, the one format both
// gpusched (external.model) and the Python package (gpusched_policy.model)
// evaluate, to the same decision (docs/policy-service.md#models).
const ModelFormat = "gpusched.io/model/v1"

// Activations are the activations a layer may name; "" is "linear".
var Activations = []string{"linear", "relu"}

// Model scores a node as a feed-forward network over some of its feature
// columns: the inputs are the columns named in Columns, in that order, as
// float64; each layer computes activation(Weights · x + Bias), summed in
// input order (so that Python's evaluation is bit for bit the same); the last
// layer has one output, the node's score. The scheduler ranks nodes by it
// exactly as by a policy service's answer. A Model is made by ParseModel
// or LoadModel, which check it and resolve its columns; one decoded
// otherwise has no inputs and must not be scored.
type Model struct {
	Format  string   `json:"format"`
	Columns []string `json:"columns"`
	Layers  []Layer  `json:"layers"`
	// Trained is free-form metadata: how the model was trained and
	// evaluated. gpusched does not read it.
	Trained json.RawMessage `json:"trained,omitempty"`

	// inputs[i] is Columns[i]'s position in gpu.FeatureColumns.
	inputs []int
}

// Layer is one layer of a Model: Weights has one row per output, each row
// one weight per input.
type Layer struct {
	Weights    [][]float64 `json:"weights"`
	Bias       []float64   `json:"bias"`
	Activation string      `json:"activation,omitempty"`
}

// LoadModel reads and checks a model file.
func LoadModel(path string) (*Model, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	m, err := ParseModel(data)
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", path, err)
	}
	return m, nil
}

// ParseModel decodes and checks a model: its format, that every column is a
// feature column, and that the layers' shapes chain from the columns to one
// output, with finite weights and known activations. The error names the
// field, its value and what is allowed.
func ParseModel(data []byte) (*Model, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var m Model
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("not a model: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("not a model: more data after the model's JSON object")
	}
	if m.Format != ModelFormat {
		return nil, fmt.Errorf("format %q: want %q", m.Format, ModelFormat)
	}
	all := gpu.FeatureColumns()
	if len(m.Columns) == 0 {
		return nil, fmt.Errorf("columns: empty; want one or more of %s", strings.Join(all, ", "))
	}
	for i, c := range m.Columns {
		j := slices.Index(all, c)
		if j < 0 {
			return nil, fmt.Errorf("columns[%d] %q: not a feature column; want one of %s", i, c, strings.Join(all, ", "))
		}
		m.inputs = append(m.inputs, j)
	}
	if len(m.Layers) == 0 {
		return nil, fmt.Errorf("layers: empty; want one or more, the last with one output")
	}
	in := len(m.Columns)
	for l, layer := range m.Layers {
		if len(layer.Weights) == 0 {
			return nil, fmt.Errorf("layers[%d].weights: no rows; want one row per output", l)
		}
		for o, row := range layer.Weights {
			if len(row) != in {
				return nil, fmt.Errorf("layers[%d].weights[%d]: %d weights; want %d, one per input", l, o, len(row), in)
			}
			if i := slices.IndexFunc(row, notFinite); i >= 0 {
				return nil, fmt.Errorf("layers[%d].weights[%d][%d]: %v; want a finite number", l, o, i, row[i])
			}
		}
		if len(layer.Bias) != len(layer.Weights) {
			return nil, fmt.Errorf("layers[%d].bias: %d values; want %d, one per output", l, len(layer.Bias), len(layer.Weights))
		}
		if i := slices.IndexFunc(layer.Bias, notFinite); i >= 0 {
			return nil, fmt.Errorf("layers[%d].bias[%d]: %v; want a finite number", l, i, layer.Bias[i])
		}
		if layer.Activation != "" && !slices.Contains(Activations, layer.Activation) {
			return nil, fmt.Errorf("layers[%d].activation %q: want one of %s", l, layer.Activation, strings.Join(Activations, ", "))
		}
		in = len(layer.Weights)
	}
	if in != 1 {
		return nil, fmt.Errorf("layers[%d]: %d outputs; the last layer must have one, the score", len(m.Layers)-1, in)
	}
	return &m, nil
}

func notFinite(v float64) bool { return math.IsNaN(v) || math.IsInf(v, 0) }

// Score is the model's score of one row of gpu.FeatureColumns.
func (m *Model) Score(row []float32) float64 {
	return m.score(row, m.scratch())
}

// scratch is room for any layer's inputs and outputs, twice.
func (m *Model) scratch() []float64 {
	width := len(m.inputs)
	for _, layer := range m.Layers {
		width = max(width, len(layer.Weights))
	}
	return make([]float64, 2*width)
}

// score is Score with scratch from m.scratch.
func (m *Model) score(row []float32, scratch []float64) float64 {
	half := len(scratch) / 2
	x, next := scratch[:len(m.inputs)], scratch[half:]
	for i, j := range m.inputs {
		x[i] = float64(row[j])
	}
	for _, layer := range m.Layers {
		y := next[:len(layer.Weights)]
		for o, w := range layer.Weights {
			// bias + w[0]·x[0] + w[1]·x[1] + ..., each product rounded
			// before the sum (the conversion forbids a fused
			// multiply-add), as the Python package computes it.
			s := layer.Bias[o]
			for i, v := range x {
				s += float64(w[i] * v)
			}
			if layer.Activation == "relu" && s <= 0 {
				s = 0 // +0 for −0 too, as the Python package
			}
			y[o] = s
		}
		x, next = y, x[:cap(x)]
	}
	return x[0]
}

// ScoreFeatures scores each node's row of gpu.FeatureColumns for demand d.
func (m *Model) ScoreFeatures(nodes []gpu.NodeFeatures, d *gpu.Demand) []float64 {
	out := make([]float64, len(nodes))
	row, scratch := make([]float32, 0, len(gpu.FeatureColumns())), m.scratch()
	for i := range nodes {
		row = nodes[i].AppendRow(row[:0], d)
		out[i] = m.score(row, scratch)
	}
	return out
}
