package whatif

import (
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

// benchCluster is a 5000-node cluster about half full: nodes of 8, 4 and
// 1 GPUs, each node holding a bound whole-GPU pod and a share, and two
// 8×H100 nodes to add.
func benchCluster() Input {
	const nodes = 5000
	in := Input{}
	for i := range nodes {
		name := fmt.Sprintf("node-%04d", i)
		var w *gt.NodeWrapper
		switch i % 3 {
		case 0:
			w = gt.MakeGPUNode(name).GFD("NVIDIA-A100-SXM4-80GB", 8, 81920)
		case 1:
			w = gt.MakeGPUNode(name).GFD("Tesla-V100-SXM2-32GB", 4, 32768)
		default:
			w = gt.MakeGPUNode(name).GFD("Tesla-T4", 1, 15360)
		}
		in.Nodes = append(in.Nodes, w.Obj())
		in.Pods = append(in.Pods, gt.MakeGPUPod(name+"-share").Milli(int64(100*(1+i%9))).CPU("2").Node(name).
			Assigned(gpu.Assignment{Node: name, Devices: []int{0}, Milli: int64(100 * (1 + i%9))}).Obj())
		if i%3 != 2 {
			in.Pods = append(in.Pods, gt.MakeGPUPod(name+"-train").GPUs(2).CPU("8").Node(name).
				Assigned(gpu.Assignment{Node: name, Devices: []int{1, 2}, Milli: 1000}).Obj())
		}
	}
	in.ExtraNodes = []*v1.Node{
		gt.MakeGPUNode("h100-a").GFD("NVIDIA-H100-80GB-HBM3", 8, 81920).Obj(),
		gt.MakeGPUNode("h100-b").GFD("NVIDIA-H100-80GB-HBM3", 8, 81920).Obj(),
	}
	// 12 pods: 4 of 8 GPUs, 4 of 2 GPUs, 4 shares.
	for i := range 12 {
		p := gt.MakeGPUPod(fmt.Sprintf("new-%02d", i)).CPU("4")
		switch i % 3 {
		case 0:
			p = p.GPUs(8)
		case 1:
			p = p.GPUs(2)
		default:
			p = p.Milli(250)
		}
		in.NewPods = append(in.NewPods, p.Obj())
	}
	return in
}

// BenchmarkWhatIf is one what-if of 12 pods on 5000 nodes (about 8300
// bound pods) plus two extra nodes. "read" reads the cluster and measures
// it, placing nothing; "run/<policy>" is a whole Run with one policy;
// "place/<policy>" only places the pods on a cluster already read; "all"
// compares every policy in one Run, which reads the cluster once. Run it
// with
//
//	go test -run '^$' -bench WhatIf -benchmem ./pkg/whatif
func BenchmarkWhatIf(b *testing.B) {
	in := benchCluster()
	run := func(b *testing.B, in Input, policies []string) {
		b.ReportAllocs()
		for b.Loop() {
			results, err := Run(in, Options{Policies: policies, Seed: DefaultSeed})
			if err != nil {
				b.Fatal(err)
			}
			if len(in.NewPods) > 0 && results[0].Summary.Placed == 0 {
				b.Fatal("nothing placed")
			}
		}
	}
	readOnly := in
	readOnly.NewPods = nil
	b.Run("read", func(b *testing.B) { run(b, readOnly, []string{string(gpu.PolicyBestFit)}) })
	for _, policy := range gpu.PolicyNames() {
		b.Run("run/"+policy, func(b *testing.B) { run(b, in, []string{policy}) })
	}
	c, err := newCluster(in, DefaultSeed)
	if err != nil {
		b.Fatal(err)
	}
	for _, name := range gpu.PolicyNames() {
		b.Run("place/"+name, func(b *testing.B) {
			fleet := c.newFleet()
			policy, err := c.newPolicy(gpu.PolicyType(name), fleet)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if r := c.run(name, policy, fleet); r.Summary.Placed == 0 {
					b.Fatal("nothing placed")
				}
			}
		})
	}
	b.Run("all", func(b *testing.B) { run(b, in, nil) })
}
