package trace

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// Arrival is how a workload's pods reach the scheduler.
type Arrival string

const (
	// ArrivalFGD is the FGD paper's protocol: pods sorted by name, shuffled
	// with the seed, topped up by sampling with replacement until the GPU
	// request passes TopUpFactor × the cluster's GPU capacity, submitted one
	// at a time with no departures; a pod that fits nowhere is dropped.
	ArrivalFGD Arrival = "fgd"
	// ArrivalReplay follows the trace's clock: pods arrive at their creation
	// time and leave at their deletion time, freeing their GPUs. A pod that
	// fits nowhere when it arrives is dropped, as in ArrivalFGD.
	ArrivalReplay Arrival = "replay"
)

// Arrivals lists the arrival modes, for validation messages.
var Arrivals = []Arrival{ArrivalFGD, ArrivalReplay}

// TopUpFactor is how far the FGD protocol fills the cluster: the submitted
// GPU request reaches 1.3 × capacity.
const TopUpFactor = 1.3

// Event is one step of a simulation: a pod arrives or leaves.
type Event struct {
	Pod    int // index into the run's pod list
	Depart bool
	Time   int64
}

// FGDSequence orders the pods of one FGD run for a seed and tops them up
// to TopUpFactor × capacityMilli (the cluster's GPUs in milli-GPU). It
// returns the run's pods (originals then samples, clones renamed) in
// arrival order.
func FGDSequence(pods []Pod, seed int64, capacityMilli int64) []Pod {
	sorted := slices.Clone(pods)
	slices.SortFunc(sorted, func(a, b Pod) int { return cmp.Compare(a.Pod.Name, b.Pod.Name) })
	order := slices.Clone(sorted)
	rng := rand.New(rand.NewPCG(uint64(seed), 0x9e3779b97f4a7c15))
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })

	var requested int64
	for _, p := range order {
		requested += DemandMilli(p)
	}
	// Top up with samples from the name-sorted pods, appended after the
	// shuffled ones. As the reference simulator does, a sample is kept while
	// the total plus its per-GPU milli (not count × milli) stays within the
	// limit; the first that would pass it ends the top-up.
	limit := int64(TopUpFactor * float64(capacityMilli))
	if requested > limit {
		// Too much already: drop random pods until the request is within the limit.
		for requested > limit {
			i := rng.IntN(len(order))
			requested -= DemandMilli(order[i])
			order = slices.Delete(order, i, i+1)
		}
		return order
	}
	if !slices.ContainsFunc(sorted, func(p Pod) bool { return perGPUMilli(p) > 0 }) {
		return order // no GPU pods: nothing to top up with
	}
	for i := 0; ; i++ {
		src := sorted[rng.IntN(len(sorted))]
		if requested+perGPUMilli(src) > limit {
			break
		}
		requested += DemandMilli(src)
		clone := src
		clone.Pod = src.Pod.DeepCopy()
		clone.Pod.Name = fmt.Sprintf("%s-topup-%d", src.Pod.Name, i)
		clone.Pod.UID = types.UID(fmt.Sprintf("%s-topup-%d", src.Pod.UID, i))
		order = append(order, clone)
	}
	return order
}

// ReplayEvents orders arrivals and departures by time; at equal times
// departures come first, so that the freed GPUs are there for the arrivals.
func ReplayEvents(pods []Pod) []Event {
	events := make([]Event, 0, 2*len(pods))
	for i, p := range pods {
		events = append(events, Event{Pod: i, Time: p.Created})
		if p.Deleted < NeverDeleted {
			events = append(events, Event{Pod: i, Depart: true, Time: p.Deleted})
		}
	}
	slices.SortStableFunc(events, func(a, b Event) int {
		if c := cmp.Compare(a.Time, b.Time); c != 0 {
			return c
		}
		if a.Depart != b.Depart {
			if a.Depart {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.Pod, b.Pod)
	})
	return events
}

// DemandMilli is a pod's GPU request in milli-GPU (count × per-GPU milli); a
// pod whose demand is malformed requests nothing.
func DemandMilli(p Pod) int64 {
	d, err := gpu.DemandFromPod(p.Pod)
	if err != nil {
		return 0
	}
	return d.TotalMilli()
}

func perGPUMilli(p Pod) int64 {
	d, err := gpu.DemandFromPod(p.Pod)
	if err != nil || d.IsZero() {
		return 0
	}
	return d.Milli
}

// CapacityMilli is the cluster's GPU capacity in milli-GPU.
func CapacityMilli(nodes []*v1.Node) int64 {
	var total int64
	for _, n := range nodes {
		if inv, err := gpu.InventoryFromNode(n); err == nil {
			total += int64(inv.Len()) * gpu.MilliPerGPU
		}
	}
	return total
}
