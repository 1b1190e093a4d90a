package gang

import (
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// NodeModels returns the distinct GPU models of a node's inventory, in the
// order its GPUs list them; nil for a node without GPUs, with an invalid
// inventory, or whose GPUs are DRA devices (not on the Node object).
func NodeModels(node *v1.Node) []string {
	inv, err := gpu.InventoryFromNode(node)
	if err != nil || inv == nil {
		return nil
	}
	var out []string
	for _, d := range inv.Devices {
		if d.Model != "" && !containsFold(out, d.Model) {
			out = append(out, d.Model)
		}
	}
	return out
}

// SharesModel reports whether one of the models is in allowed, without
// regard to case (the way gpu.Demand.AllowsModel matches).
func SharesModel(models, allowed []string) bool {
	for _, m := range models {
		if containsFold(allowed, m) {
			return true
		}
	}
	return false
}

func containsFold(list []string, s string) bool {
	return slices.ContainsFunc(list, func(x string) bool { return strings.EqualFold(x, s) })
}

// ModelCount is how many of a gang's pods fit, on empty nodes, when every
// pod with a GPU demand is held to one GPU model.
type ModelCount struct {
	Model  string
	Placed int
}

// ModelFit is a gang's FitEmpty result per GPU model of the cluster.
type ModelFit struct {
	// Needed is how many pods must be placed together (minMember).
	Needed int
	// Models are the cluster's GPU models, sorted by name, each with the
	// number of the gang's pods that fit on GPUs of that model alone.
	Models []ModelCount
}

// Holding returns the models on which the whole gang (minMember pods) fits
// with every GPU free, sorted by name; nil when none does.
func (f ModelFit) Holding() []string {
	var out []string
	for _, m := range f.Models {
		if m.Placed >= f.Needed {
			out = append(out, m.Model)
		}
	}
	return out
}

// Reason says that no single model holds the gang, naming each model and
// how many of the gang's pods fit on it, e.g. "no single GPU model holds
// the gang's 3 pods (NVIDIA-A100-SXM4-80GB: 2 of 3 fit, Tesla-T4: 2 of 3
// fit)". The text is stable: tools may match its beginning.
func (f ModelFit) Reason() string {
	parts := make([]string, len(f.Models))
	for i, m := range f.Models {
		parts[i] = fmt.Sprintf("%s: %d of %d fit", m.Model, m.Placed, f.Needed)
	}
	return fmt.Sprintf("no single GPU model holds the gang's %d pods (%s)", f.Needed, strings.Join(parts, ", "))
}

// FitEmptyByModel runs FitEmpty once per GPU model of the nodes, each time
// with every GPU demand of the gang held to that model: a demand that
// already allows other models only keeps that one, a demand that does not
// allow it (its gpusched.io/gpu-models annotation) is left out, and so
// counts as not placed. Pods without GPU demand go along unchanged. The
// models are compared without regard to case and reported as the first node
// spells them.
func FitEmptyByModel(nodes []*v1.Node, demands []gpu.Demand, minMember int) ModelFit {
	var models []string
	for _, n := range nodes {
		for _, m := range NodeModels(n) {
			if !containsFold(models, m) {
				models = append(models, m)
			}
		}
	}
	slices.Sort(models)
	f := ModelFit{Needed: minMember, Models: make([]ModelCount, 0, len(models))}
	for _, model := range models {
		held := make([]gpu.Demand, 0, len(demands))
		for _, d := range demands {
			if d.IsZero() {
				held = append(held, d)
				continue
			}
			if !d.AllowsModel(model) {
				continue
			}
			d.Models = []string{model}
			held = append(held, d)
		}
		f.Models = append(f.Models, ModelCount{Model: model, Placed: FitEmpty(nodes, held, minMember).Placed})
	}
	return f
}
