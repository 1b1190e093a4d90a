package gpu

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	packinglp "github.com/gpusched/gpusched/pkg/packing"
)

// ModelGPUs is a cluster's GPUs counted by model, sorted by model. A
// ModelGPUs handed out (Fleet, Ledger.GPUsByModel) is never modified.
type ModelGPUs []ModelCount

// ModelCount is the GPUs of one model.
type ModelCount struct {
	Model string
	GPUs  int64
}

// NegateModels is the counts with their signs changed, to subtract them
// with AddModels.
func NegateModels(c ModelGPUs) ModelGPUs {
	out := make(ModelGPUs, len(c))
	for i, m := range c {
		out[i] = ModelCount{m.Model, -m.GPUs}
	}
	return out
}

// AddModels is the sum of two counts by model, sorted by model, without
// the models whose sum is not positive.
func AddModels(a, b ModelGPUs) ModelGPUs {
	byModel := map[string]int64{}
	for _, c := range slices.Concat(a, b) {
		byModel[c.Model] += c.GPUs
	}
	return modelGPUsOf(byModel)
}

// CountModels counts the devices of inventories by model.
func CountModels(inventories []*Inventory) ModelGPUs {
	byModel := map[string]int64{}
	for _, inv := range inventories {
		if inv != nil {
			for _, d := range inv.Devices {
				byModel[d.Model]++
			}
		}
	}
	return modelGPUsOf(byModel)
}

func modelGPUsOf(byModel map[string]int64) ModelGPUs {
	out := make(ModelGPUs, 0, len(byModel))
	for m, g := range byModel {
		if g > 0 {
			out = append(out, ModelCount{m, g})
		}
	}
	slices.SortFunc(out, func(a, b ModelCount) int { return strings.Compare(a.Model, b.Model) })
	return out
}

// ModelItems is a workload's GPU items as the packing LP sees them: a kind
// per item size (Demand.PackingItems) and set of the cluster's models the
// item may use (Demand.AllowsModel), and a class per group of models that
// the same kinds may use. Models no demand tells apart are one class, so a
// workload without models has one kind per size and one class: the LP
// without models. The floors (pkg/simulator) and PairFit's prices both
// build their LP here.
type ModelItems struct {
	// Kinds are the kinds, by size ascending, then by their models; Labels
	// name them (the size, and " on " its models when limited); Amounts are
	// the items of each kind.
	Kinds   []packinglp.Kind
	Labels  []string
	Amounts []float64
	// ClassModels and ClassGPUs are each class's models and GPUs.
	ClassModels [][]string
	ClassGPUs   []int64
	// Models is the cluster's GPUs by model the items were sorted onto.
	Models ModelGPUs
	// classOf is the class of each of Models; index maps a kind's key to
	// the kind.
	classOf []int
	index   map[string]int
}

// NewModelItems sorts the demands' items onto the cluster's models:
// copies[i] copies of demands[i] (1 each when copies is nil).
func NewModelItems(models ModelGPUs, demands []Demand, copies []float64) *ModelItems {
	it := &ModelItems{Models: models, index: map[string]int{}}
	type kindInfo struct {
		size    int64
		allowed []int // model indices; nil: every model
		amount  float64
	}
	infos := map[string]*kindInfo{}
	for i := range demands {
		size, n := demands[i].PackingItems()
		if n == 0 || (copies != nil && copies[i] <= 0) {
			continue
		}
		key, allowed := it.kindKey(&demands[i], size)
		if infos[key] == nil {
			infos[key] = &kindInfo{size: size, allowed: allowed}
		}
		c := 1.0
		if copies != nil {
			c = copies[i]
		}
		infos[key].amount += c * float64(n)
	}
	// A model's signature is which limited kinds may use it; models of one
	// signature are one class.
	var limited []string
	for key, k := range infos {
		if k.allowed != nil {
			limited = append(limited, key)
		}
	}
	slices.Sort(limited)
	it.classOf = make([]int, len(models))
	bySignature := map[string]int{}
	for m := range models {
		var sig strings.Builder
		for _, key := range limited {
			if slices.Contains(infos[key].allowed, m) {
				sig.WriteString(key + ";")
			}
		}
		c, ok := bySignature[sig.String()]
		if !ok {
			c = len(it.ClassGPUs)
			bySignature[sig.String()] = c
			it.ClassGPUs = append(it.ClassGPUs, 0)
			it.ClassModels = append(it.ClassModels, nil)
		}
		it.classOf[m] = c
		it.ClassGPUs[c] += models[m].GPUs
		it.ClassModels[c] = append(it.ClassModels[c], models[m].Model)
	}
	keys := make([]string, 0, len(infos))
	for key := range infos {
		keys = append(keys, key)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if infos[a].size != infos[b].size {
			return int(infos[a].size - infos[b].size)
		}
		return strings.Compare(a, b)
	})
	for _, key := range keys {
		k := infos[key]
		kind := packinglp.Kind{Size: k.size}
		label := strconv.FormatInt(k.size, 10)
		if k.allowed != nil {
			kind.Classes = []int{} // limited, perhaps to no model the cluster has
			var names []string
			for _, m := range k.allowed {
				names = append(names, models[m].Model)
				if c := it.classOf[m]; !slices.Contains(kind.Classes, c) {
					kind.Classes = append(kind.Classes, c)
				}
			}
			slices.Sort(kind.Classes)
			if len(names) == 0 {
				label += " on no model of the cluster"
			} else {
				label += " on " + strings.Join(names, "|")
			}
		}
		it.index[key] = len(it.Kinds)
		it.Kinds = append(it.Kinds, kind)
		it.Labels = append(it.Labels, label)
		it.Amounts = append(it.Amounts, k.amount)
	}
	return it
}

// kindKey names the kind of a demand's items of size: the size, and the
// indices of the cluster's models it may use unless it may use them all
// (allowed is then nil).
func (it *ModelItems) kindKey(d *Demand, size int64) (string, []int) {
	key := strconv.FormatInt(size, 10)
	if len(d.Models) == 0 {
		return key, nil
	}
	allowed := []int{}
	for m := range it.Models {
		if d.AllowsModel(it.Models[m].Model) {
			allowed = append(allowed, m)
		}
	}
	if len(allowed) == len(it.Models) {
		return key, nil
	}
	return fmt.Sprintf("%s:%v", key, allowed), allowed
}

// KindOf is the kind of a demand's items and their number; ok is false
// for a demand without GPUs or of a kind the items do not hold.
func (it *ModelItems) KindOf(d *Demand) (kind, n int, ok bool) {
	size, n := d.PackingItems()
	if n == 0 {
		return 0, 0, false
	}
	key, _ := it.kindKey(d, size)
	kind, ok = it.index[key]
	return kind, n, ok
}

// ClassOf is the class of a model of Models; ok is false for a model it
// does not count.
func (it *ModelItems) ClassOf(model string) (class int, ok bool) {
	m, found := slices.BinarySearchFunc(it.Models, model, func(c ModelCount, model string) int { return strings.Compare(c.Model, model) })
	if !found {
		return 0, false
	}
	return it.classOf[m], true
}

// ModelsCounted reports whether some kind is limited to some of the
// cluster's models, so that the LP's bound counts them.
func (it *ModelItems) ModelsCounted() bool {
	for _, k := range it.Kinds {
		if k.Classes != nil {
			return true
		}
	}
	return false
}

// Counts is Amounts rounded to whole items.
func (it *ModelItems) Counts() []int64 {
	out := make([]int64, len(it.Amounts))
	for i, a := range it.Amounts {
		out[i] = int64(a + 0.5)
	}
	return out
}
