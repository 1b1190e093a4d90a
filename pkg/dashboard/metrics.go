package dashboard

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpusched/gpusched/pkg/gpuview"
)

// Collector exports the current snapshot of a State as Prometheus metrics,
// read at scrape time: what the page shows, for Prometheus and Grafana.
//
// Labels are bounded by the cluster's size and a fixed set of values: node,
// gpu (the GPU's index), model, pool and reason (one of ReasonClasses).
// No series carries a pod's name or free text. Per-GPU series (node × GPU)
// can be left out on very large clusters (NewCollector's perGPU); the
// per-node and cluster series stay.
type Collector struct {
	state  *State
	perGPU bool
	now    func() time.Time
}

var (
	gpuLabels  = []string{"node", "gpu", "model"}
	nodeLabels = []string{"node", "pool", "model"}

	descGPUAllocatedMilli = prometheus.NewDesc("gpusched_gpu_allocated_milli",
		"Milli-GPU of the GPU that pods hold (1000 = the whole GPU).", gpuLabels, nil)
	descGPUAllocatedMemory = prometheus.NewDesc("gpusched_gpu_allocated_memory_mib",
		"GPU memory in MiB that pods sharing the GPU reserve (a GPU held whole counts all of it).", gpuLabels, nil)
	descGPUCapacityMemory = prometheus.NewDesc("gpusched_gpu_capacity_memory_mib",
		"GPU memory in MiB.", gpuLabels, nil)
	descGPUUnhealthy = prometheus.NewDesc("gpusched_gpu_unhealthy",
		"1 when the node marks the GPU unhealthy (it gets no new pods), else 0.", gpuLabels, nil)

	descNodeCapacity = prometheus.NewDesc("gpusched_node_gpu_capacity_milli",
		"The node's GPU capacity in milli-GPU (1000 per GPU).", nodeLabels, nil)
	descNodeAllocated = prometheus.NewDesc("gpusched_node_gpu_allocated_milli",
		"Milli-GPU of the node's GPUs that pods hold.", nodeLabels, nil)
	descNodeFragmented = prometheus.NewDesc("gpusched_node_fragmented_milli",
		"Free milli-GPU of the node that the typical pods could not use, weighted by how often each comes (the FGD measure).", nodeLabels, nil)
	descNodeInventoryInvalid = prometheus.NewDesc("gpusched_node_gpu_inventory_invalid",
		"1 when the node's GPU labels or annotation are malformed, so its GPUs cannot be read.", []string{"node", "pool"}, nil)
	descNodeConflicts = prometheus.NewDesc("gpusched_node_gpu_assignment_conflicts",
		"Bound pods' GPU assignments on the node that name a GPU, by UUID, the node now has at another index or no longer has.", []string{"node", "pool"}, nil)

	descClusterCapacity = prometheus.NewDesc("gpusched_cluster_gpu_capacity_milli",
		"GPU capacity of the cluster in milli-GPU.", nil, nil)
	descClusterAllocated = prometheus.NewDesc("gpusched_cluster_gpu_allocated_milli",
		"Milli-GPU of the cluster that pods hold.", nil, nil)
	descClusterFragmented = prometheus.NewDesc("gpusched_cluster_fragmented_milli",
		"Sum of gpusched_node_fragmented_milli over the nodes.", nil, nil)
	descClusterGPUs = prometheus.NewDesc("gpusched_cluster_gpus",
		"GPUs in the cluster.", nil, nil)
	descPending = prometheus.NewDesc("gpusched_pending_gpu_pods",
		"GPU pods not yet bound to a node, by class of the scheduler's reason.", []string{"reason"}, nil)
	descSnapshotAge = prometheus.NewDesc("gpusched_dashboard_snapshot_age_seconds",
		"Seconds since the snapshot these metrics describe was built.", nil, nil)
)

// NewCollector returns a Collector of state's snapshots; perGPU includes
// the per-GPU series (gpusched_gpu_*).
func NewCollector(state *State, perGPU bool) *Collector {
	return &Collector{state: state, perGPU: perGPU, now: time.Now}
}

// Describe sends the descriptors of every metric the collector can export,
// per-GPU ones only when they are on.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	if c.perGPU {
		ch <- descGPUAllocatedMilli
		ch <- descGPUAllocatedMemory
		ch <- descGPUCapacityMemory
		ch <- descGPUUnhealthy
	}
	for _, d := range []*prometheus.Desc{descNodeCapacity, descNodeAllocated, descNodeFragmented, descNodeInventoryInvalid, descNodeConflicts,
		descClusterCapacity, descClusterAllocated, descClusterFragmented, descClusterGPUs, descPending, descSnapshotAge} {
		ch <- d
	}
}

// Collect sends the current snapshot's values; nothing before the first
// snapshot.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.state.mu.Lock()
	p := c.state.cur
	c.state.mu.Unlock()
	if p == nil {
		return
	}
	snap := p.snap
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for i := range snap.Nodes {
		n := &snap.Nodes[i]
		if n.InventoryError != "" {
			gauge(descNodeInventoryInvalid, 1, n.Name, n.Pool)
			continue
		}
		gauge(descNodeInventoryInvalid, 0, n.Name, n.Pool)
		gauge(descNodeConflicts, float64(len(n.Conflicts)), n.Name, n.Pool)
		gauge(descNodeCapacity, float64(n.CapacityMilli), n.Name, n.Pool, n.Model)
		gauge(descNodeAllocated, float64(n.AllocatedMilli), n.Name, n.Pool, n.Model)
		gauge(descNodeFragmented, n.FragmentedMilli, n.Name, n.Pool, n.Model)
		if c.perGPU {
			c.collectGPUs(ch, n)
		}
	}
	cl := &snap.Cluster
	gauge(descClusterCapacity, float64(cl.CapacityMilli))
	gauge(descClusterAllocated, float64(cl.AllocatedMilli))
	gauge(descClusterFragmented, cl.FragmentedMilli)
	gauge(descClusterGPUs, float64(cl.GPUCount))
	byClass := map[string]int{}
	for i := range snap.Pending {
		byClass[ReasonClass(&snap.Pending[i])]++
	}
	for _, class := range ReasonClasses() {
		gauge(descPending, float64(byClass[class]), class)
	}
	gauge(descSnapshotAge, c.now().Sub(p.built).Seconds())
}

func (c *Collector) collectGPUs(ch chan<- prometheus.Metric, n *gpuview.Node) {
	for _, g := range n.GPUs {
		labels := []string{n.Name, strconv.Itoa(g.Index), g.Model}
		mem := allocatedMemory(&g)
		unhealthy := 0.0
		if g.Unhealthy != "" {
			unhealthy = 1
		}
		ch <- prometheus.MustNewConstMetric(descGPUAllocatedMilli, prometheus.GaugeValue, float64(g.AllocatedMilli), labels...)
		ch <- prometheus.MustNewConstMetric(descGPUAllocatedMemory, prometheus.GaugeValue, float64(mem), labels...)
		ch <- prometheus.MustNewConstMetric(descGPUCapacityMemory, prometheus.GaugeValue, float64(g.MemoryMiB), labels...)
		ch <- prometheus.MustNewConstMetric(descGPUUnhealthy, prometheus.GaugeValue, unhealthy, labels...)
	}
}

// allocatedMemory is the GPU memory pods hold: all of it when a pod holds
// the whole GPU (whole GPUs reserve no memory share), else what the shares
// reserve.
func allocatedMemory(g *gpuview.GPU) int64 {
	for _, h := range g.Holders {
		if h.Milli >= 1000 {
			return g.MemoryMiB
		}
	}
	if g.AllocatedMilli >= 1000 && g.AllocatedMemoryMiB == 0 {
		return g.MemoryMiB
	}
	return g.AllocatedMemoryMiB
}
