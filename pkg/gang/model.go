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
	return inventoryModels(inv)
}

// ModelsOf is NodeModels of a node as a ledger sees it, whose inventory the
// ledger has already read (and keeps until the node changes).
func ModelsOf(view *gpu.NodeGPUs) []string {
	if view == nil || view.Inventory == nil {
		return nil
	}
	return inventoryModels(view.Inventory)
}

func inventoryModels(inv *gpu.Inventory) []string {
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
func FitEmptyByModel(nodes Cluster, demands []gpu.Demand, minMember int) ModelFit {
	var models []string
	for _, n := range nodes.Nodes {
		models = addModels(models, NodeModels(n))
	}
	for _, v := range nodes.DRA {
		models = addModels(models, ModelsOf(v))
	}
	return byModel(models, demands, minMember, func(held []gpu.Demand) EmptyFit { return FitEmpty(nodes, held, minMember) })
}

// FitFreeByModel is FitEmptyByModel on the nodes as they are (FitFree):
// per model, how many of the demands fit in the GPUs free now.
func FitFreeByModel(views []*gpu.NodeGPUs, demands []gpu.Demand, minMember int) ModelFit {
	var models []string
	for _, v := range views {
		if v == nil || v.Inventory == nil {
			continue
		}
		for _, d := range v.Inventory.Devices {
			models = addModels(models, []string{d.Model})
		}
	}
	return byModel(models, demands, minMember, func(held []gpu.Demand) EmptyFit { return FitFree(views, held, minMember) })
}

func addModels(models, more []string) []string {
	for _, m := range more {
		if m != "" && !containsFold(models, m) {
			models = append(models, m)
		}
	}
	return models
}

func byModel(models []string, demands []gpu.Demand, minMember int, fit func([]gpu.Demand) EmptyFit) ModelFit {
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
		f.Models = append(f.Models, ModelCount{Model: model, Placed: fit(held).Placed})
	}
	return f
}

// ChooseModels decides the GPU models the next pod of a one-model gang may
// run on; nil means any. empty is the gang's FitEmptyByModel, free its
// unplaced pods' FitFreeByModel (needed only while placed is empty), placed
// the models of the nodes its pods with GPUs are reserved or bound on.
//
//  1. No model holds the whole gang even with every GPU free: any model
//     (noneHolds is true when the cluster has more than one model, for the
//     caller to report).
//  2. Pods are placed on models that hold the gang: those models.
//  3. None is placed: the models that hold the gang and hold its pods in
//     what is free now, so that the first pod goes where the rest fit.
//  4. Otherwise the models that hold the gang: it waits for one of them.
func ChooseModels(empty, free ModelFit, placed []string) (models []string, noneHolds bool) {
	holding := empty.Holding()
	if len(holding) == 0 {
		return nil, len(empty.Models) > 1
	}
	if used := intersectFold(placed, holding); len(used) > 0 {
		return used, false
	}
	if now := intersectFold(free.Holding(), holding); len(placed) == 0 && len(now) > 0 {
		return now, false
	}
	return holding, false
}

func intersectFold(a, b []string) []string {
	var out []string
	for _, m := range a {
		if containsFold(b, m) {
			out = append(out, m)
		}
	}
	return out
}
