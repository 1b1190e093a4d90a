package floor

import (
	v1 "k8s.io/api/core/v1"

	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/packing"
)

// ModelGPUsOf counts the nodes' GPUs by model, the GPUs the floors place on.
func ModelGPUsOf(nodes []*v1.Node) gpu.ModelGPUs {
	inventories := make([]*gpu.Inventory, 0, len(nodes))
	for _, n := range nodes {
		if inv, err := gpu.InventoryFromNode(n); err == nil {
			inventories = append(inventories, inv)
		}
	}
	return gpu.CountModels(inventories)
}

// oneModel is gpus GPUs of a single model, for workloads without models.
func oneModel(gpus int64) gpu.ModelGPUs { return gpu.ModelGPUs{{Model: "", GPUs: gpus}} }

// lpPackingBound is packing.Bound for the demands' items on the cluster's
// GPUs.
func lpPackingBound(demands []gpu.Demand, models gpu.ModelGPUs) (*gpu.ModelItems, packing.Certificate, error) {
	it := gpu.NewModelItems(models, demands, nil)
	cert, err := packing.Bound(it.Kinds, it.Counts(), it.ClassGPUs)
	return it, cert, err
}
