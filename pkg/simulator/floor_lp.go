package simulator

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/packing"
)

// modelGPUs is a cluster's GPUs counted by model, sorted by model.
type modelGPUs []modelCount

type modelCount struct {
	model string
	gpus  int64
}

// clusterModelGPUs counts the nodes' GPUs by model.
func clusterModelGPUs(nodes []*v1.Node) modelGPUs {
	byModel := map[string]int64{}
	for _, n := range nodes {
		if inv, err := gpu.InventoryFromNode(n); err == nil {
			for _, d := range inv.Devices {
				byModel[d.Model]++
			}
		}
	}
	var out modelGPUs
	for m, g := range byModel {
		out = append(out, modelCount{m, g})
	}
	slices.SortFunc(out, func(a, b modelCount) int { return strings.Compare(a.model, b.model) })
	return out
}

// oneModel is gpus GPUs of a single model, for workloads without models.
func oneModel(gpus int64) modelGPUs { return modelGPUs{{"", gpus}} }

// packingItems is a workload's GPU items as the packing LP sees them: a
// kind per item size and set of the cluster's models the item may use
// (gpu.Demand.PackingItems, gpu.Demand.AllowsModel), and a class per group
// of models that the same kinds may use. Models no pod tells apart are one
// class, so a workload without models has one kind per size and one class:
// the LP without models.
type packingItems struct {
	kinds  []packing.Kind
	labels []string // per kind: its size, and " on " its models when limited
	counts []int64
	// classModels and classGPUs are each class's models and GPUs.
	classModels [][]string
	classGPUs   []int64
	models      modelGPUs
	index       map[string]int // kindKey → kind
}

// itemsOf is the demands' items on the cluster's models.
func itemsOf(demands []gpu.Demand, models modelGPUs) *packingItems {
	it := &packingItems{models: models, index: map[string]int{}}
	type kindInfo struct {
		size    int64
		allowed []int // model indices; nil: every model
		count   int64
	}
	infos := map[string]*kindInfo{}
	for i := range demands {
		size, n := demands[i].PackingItems()
		if n == 0 {
			continue
		}
		key, allowed := it.kindKey(&demands[i], size)
		if infos[key] == nil {
			infos[key] = &kindInfo{size: size, allowed: allowed}
		}
		infos[key].count += int64(n)
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
	classOf := make([]int, len(models))
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
			c = len(it.classGPUs)
			bySignature[sig.String()] = c
			it.classGPUs = append(it.classGPUs, 0)
			it.classModels = append(it.classModels, nil)
		}
		classOf[m] = c
		it.classGPUs[c] += models[m].gpus
		it.classModels[c] = append(it.classModels[c], models[m].model)
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
		kind := packing.Kind{Size: k.size}
		label := strconv.FormatInt(k.size, 10)
		if k.allowed != nil {
			kind.Classes = []int{} // limited, perhaps to no model the cluster has
			var names []string
			for _, m := range k.allowed {
				names = append(names, models[m].model)
				if c := classOf[m]; !slices.Contains(kind.Classes, c) {
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
		it.index[key] = len(it.kinds)
		it.kinds = append(it.kinds, kind)
		it.labels = append(it.labels, label)
		it.counts = append(it.counts, k.count)
	}
	return it
}

// kindKey names the kind of a demand's items of size: the size, and the
// indices of the cluster's models it may use unless it may use them all
// (allowed is then nil).
func (it *packingItems) kindKey(d *gpu.Demand, size int64) (string, []int) {
	key := strconv.FormatInt(size, 10)
	if len(d.Models) == 0 {
		return key, nil
	}
	allowed := []int{}
	for m := range it.models {
		if d.AllowsModel(it.models[m].model) {
			allowed = append(allowed, m)
		}
	}
	if len(allowed) == len(it.models) {
		return key, nil
	}
	return fmt.Sprintf("%s:%v", key, allowed), allowed
}

// kindOf is the kind of a demand's items and their number; n is 0 for a
// demand without GPUs.
func (it *packingItems) kindOf(d *gpu.Demand) (kind, n int) {
	size, n := d.PackingItems()
	if n == 0 {
		return 0, 0
	}
	key, _ := it.kindKey(d, size)
	return it.index[key], n
}

// modelsCounted reports whether some kind is limited to some of the
// cluster's models, so that the LP's bound counts them.
func (it *packingItems) modelsCounted() bool {
	for _, k := range it.kinds {
		if k.Classes != nil {
			return true
		}
	}
	return false
}

// lpPackingBound is packing.Bound for the demands' items on the cluster's
// GPUs.
func lpPackingBound(demands []gpu.Demand, models modelGPUs) (*packingItems, packing.Certificate, error) {
	it := itemsOf(demands, models)
	cert, err := packing.Bound(it.kinds, it.counts, it.classGPUs)
	return it, cert, err
}
