package gputelemetry_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
	"github.com/gpusched/gpusched/pkg/plugins/gputelemetry"
	"github.com/gpusched/gpusched/pkg/telemetry"
)

// BenchmarkScore is GPUTelemetry's Score over 5000 8-GPU nodes, every GPU
// with eight signals sampled, per node: "cached" as in steady state (the
// snapshot and the pod's weighting unchanged since the last pod), "fresh"
// with a new snapshot for every pass over the nodes (the first pod after a
// refresh), which computes every score.
func BenchmarkScore(b *testing.B) {
	const nodes = 5000
	_, ctx := ktesting.NewTestContext(b)
	var objs []*v1.Node
	snap := &telemetry.Snapshot{Time: sampledAt, Nodes: map[string]*telemetry.Node{}}
	for n := range nodes {
		name := fmt.Sprintf("node-%d", n)
		var devs []gpu.Device
		tn := &telemetry.Node{}
		for g := range 8 {
			uuid := fmt.Sprintf("GPU-%d-%d", n, g)
			devs = append(devs, gpu.Device{Index: g, UUID: uuid, Model: a100, MemoryMiB: 81920})
			tn.GPUs = append(tn.GPUs, gpuSample(g, uuid, telemetry.GPUUtil, float64((n+g)%100), telemetry.FBUsed, 20000.0,
				telemetry.FBFree, 60000.0, telemetry.EncUtil, 3.0, telemetry.DecUtil, 4.0, telemetry.PowerUsage, 200.0,
				telemetry.DRAMActive, 0.4, telemetry.XIDErrors, 0.0))
		}
		snap.Nodes[name] = tn
		node := gt.MakeGPUNode(name).Devices(devs...).Obj()
		node.ResourceVersion = strconv.Itoa(n + 1)
		objs = append(objs, node)
	}
	src := &fixedSource{snap}
	c := newCluster(b, src, sampledAt, objs...)
	pl, err := gputelemetry.NewWithSource(src, func() time.Time { return sampledAt })(ctx, nil, c.fw)
	if err != nil {
		b.Fatal(err)
	}
	p := pl.(*gputelemetry.GPUTelemetry)
	infos, err := c.snapshot.NodeInfos().List()
	if err != nil {
		b.Fatal(err)
	}
	pod := gt.MakeGPUPod("p").GPUs(1).Obj()
	prefilter := func() fwk.CycleState {
		state := framework.NewCycleState()
		if _, status := p.PreFilter(ctx, state, pod, nil); !status.IsSuccess() && !status.IsSkip() {
			b.Fatal(status)
		}
		return state
	}
	score := func(state fwk.CycleState, i int) {
		if _, status := p.Score(context.Background(), state, pod, infos[i%nodes]); !status.IsSuccess() {
			b.Fatal(status)
		}
	}
	b.Run("cached", func(b *testing.B) {
		state := prefilter()
		for i := range nodes {
			score(state, i) // fill the cache
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			score(state, i)
			i++
		}
	})
	b.Run("fresh", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		var state fwk.CycleState
		for b.Loop() {
			if i%nodes == 0 {
				b.StopTimer()
				copied := *snap
				src.snap = &copied // a refresh: a new snapshot
				state = prefilter()
				b.StartTimer()
			}
			score(state, i)
			i++
		}
	})
}
