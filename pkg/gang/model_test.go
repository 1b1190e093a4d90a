package gang

import (
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

const (
	h100 = "NVIDIA-H100-80GB-HBM3"
	t4   = "Tesla-T4"
)

// playground is the playground's GPU nodes: 2×A100:8, 1×H100:8, 2×T4:4.
func playground() []*v1.Node {
	return []*v1.Node{
		gt.MakeGPUNode("a100-0").GFD(a100, 8, 81920).Obj(),
		gt.MakeGPUNode("a100-1").GFD(a100, 8, 81920).Obj(),
		gt.MakeGPUNode("h100-0").GFD(h100, 8, 81920).Obj(),
		gt.MakeGPUNode("t4-0").GFD(t4, 4, 15360).Obj(),
		gt.MakeGPUNode("t4-1").GFD(t4, 4, 15360).Obj(),
	}
}

func only(d gpu.Demand, models ...string) gpu.Demand {
	d.Models = models
	return d
}

// TestOneModelFitEmptyByModel: per model, a gang's pods are placed on empty
// nodes of that model alone; the models that hold minMember pods are the
// ones a gang may run on.
func TestOneModelFitEmptyByModel(t *testing.T) {
	tests := []struct {
		name      string
		demands   []gpu.Demand
		minMember int
		want      []ModelCount // sorted by model: A100, H100, T4
		holding   []string
	}{
		// A100: 2 nodes × 8 = 16 GPUs ≥ 3 × 4 = 12 → 3 fit (two on one node, one on the other).
		// H100: 1 node × 8 = 8 → 2 fit. T4: 2 nodes × 4 → 2 fit (one per node).
		{name: "three pods of 4 GPUs: only A100 holds all", demands: repeat(whole(4), 3), minMember: 3,
			want: []ModelCount{{a100, 3}, {h100, 2}, {t4, 2}}, holding: []string{a100}},
		// 2 pods of 4: A100 16 GPUs → 2, H100 8 → 2, T4 2 × 4 → 2.
		{name: "two pods of 4 GPUs: every model holds them", demands: repeat(whole(4), 2), minMember: 2,
			want: []ModelCount{{a100, 2}, {h100, 2}, {t4, 2}}, holding: []string{a100, h100, t4}},
		// 3 pods of 8: A100 → 2 (one per node), H100 → 1, T4 → 0 (no node has 8).
		{name: "three pods of 8 GPUs: no model holds all", demands: repeat(whole(8), 3), minMember: 3,
			want: []ModelCount{{a100, 2}, {h100, 1}, {t4, 0}}, holding: nil},
		// The pods' own annotation allows T4 or H100: A100 takes none of them.
		// H100 8 GPUs → 2 pods of 4; T4 → 2.
		{name: "pods restricted to T4 or H100", demands: repeat(only(whole(4), t4, h100), 2), minMember: 2,
			want: []ModelCount{{a100, 0}, {h100, 2}, {t4, 2}}, holding: []string{h100, t4}},
		// Models are matched without regard to case.
		{name: "model named in another case", demands: repeat(only(whole(4), "tesla-t4"), 2), minMember: 2,
			want: []ModelCount{{a100, 0}, {h100, 0}, {t4, 2}}, holding: []string{t4}},
		// A launcher without GPUs goes along on every model: A100 → 1 + 2 = 3.
		// H100 → 1 + 2 = 3. T4 → 1 + 2 = 3.
		{name: "a pod without GPUs counts on every model", demands: append(repeat(whole(4), 2), gpu.Demand{}), minMember: 3,
			want: []ModelCount{{a100, 3}, {h100, 3}, {t4, 3}}, holding: []string{a100, h100, t4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := FitEmptyByModel(Cluster{Nodes: playground()}, tt.demands, tt.minMember)
			if !slices.Equal(got.Models, tt.want) || got.Needed != tt.minMember {
				t.Errorf("models %v, needed %d; want %v, %d", got.Models, got.Needed, tt.want, tt.minMember)
			}
			if h := got.Holding(); !slices.Equal(h, tt.holding) {
				t.Errorf("holding %q, want %q", h, tt.holding)
			}
		})
	}
}

func TestOneModelReason(t *testing.T) {
	got := FitEmptyByModel(Cluster{Nodes: playground()}, repeat(whole(8), 3), 3).Reason()
	want := "no single GPU model holds the gang's 3 pods (NVIDIA-A100-SXM4-80GB: 2 of 3 fit, NVIDIA-H100-80GB-HBM3: 1 of 3 fit, Tesla-T4: 0 of 3 fit)"
	if got != want {
		t.Errorf("reason\n got %q\nwant %q", got, want)
	}
}

func TestOneModelNodeModels(t *testing.T) {
	mixed := gt.MakeGPUNode("mixed").Obj()
	mixed.Annotations = map[string]string{gpu.AnnotationDevices: `[{"index":0,"model":"A"},{"index":1,"model":"B"},{"index":2,"model":"a"}]`}
	tests := []struct {
		name string
		node *v1.Node
		want []string
	}{
		{"GFD labels", gt.MakeGPUNode("n").GFD(t4, 4, 15360).Obj(), []string{t4}},
		{"devices of two models, one in two cases", mixed, []string{"A", "B"}},
		{"no GPUs", gt.MakeGPUNode("cpu").Obj(), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := NodeModels(tt.node); !slices.Equal(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
	if !SharesModel([]string{"x", t4}, []string{"TESLA-T4"}) || SharesModel([]string{a100}, []string{t4}) || SharesModel(nil, []string{t4}) {
		t.Error("SharesModel: wrong answer")
	}
}

// TestOneModelFitFreeByModel: with what is allocated now, per model.
func TestOneModelFitFreeByModel(t *testing.T) {
	views := make([]*gpu.NodeGPUs, 0, 5)
	for _, n := range playground() {
		v := gpu.EmptyNodeGPUs(n)
		if n.Name == "a100-0" || n.Name == "t4-0" {
			// a100-0 full (8 of 8 used), t4-0 has 2 of 4 used.
			used := 8
			if n.Name == "t4-0" {
				used = 2
			}
			devices := make([]int, used)
			for i := range devices {
				devices[i] = i
			}
			v = v.With(&gpu.Assignment{Node: n.Name, Devices: devices, Milli: gpu.MilliPerGPU})
		}
		views = append(views, v)
	}
	// Two pods of 4: A100 has 8 free on a100-1 → 2. H100 8 → 2.
	// T4: t4-0 has 2 free (none), t4-1 has 4 → 1.
	got := FitFreeByModel(views, repeat(whole(4), 2), 2)
	want := []ModelCount{{a100, 2}, {h100, 2}, {t4, 1}}
	if !slices.Equal(got.Models, want) {
		t.Errorf("models %v, want %v", got.Models, want)
	}
	// Three pods of 4: A100 → 2, H100 → 2, T4 → 1; none holds 3.
	if h := FitFreeByModel(views, repeat(whole(4), 3), 3).Holding(); h != nil {
		t.Errorf("holding %q, want none", h)
	}
}

// TestOneModelChooseModels: the models a gang's next pod may use.
func TestOneModelChooseModels(t *testing.T) {
	fit := func(needed int, counts ...ModelCount) ModelFit { return ModelFit{Needed: needed, Models: counts} }
	// The gang of the playground case: 3 pods of 4 GPUs; only A100 holds it empty.
	onlyA100 := fit(3, ModelCount{a100, 3}, ModelCount{h100, 2}, ModelCount{t4, 2})
	// A gang of 2 pods of 4: every model holds it empty.
	every := fit(2, ModelCount{a100, 2}, ModelCount{h100, 2}, ModelCount{t4, 2})
	tests := []struct {
		name      string
		empty     ModelFit
		free      ModelFit
		placed    []string
		want      []string
		noneHolds bool
	}{
		{name: "only one model holds the gang", empty: onlyA100, want: []string{a100}},
		// Free now: A100 holds 1 of 2, H100 2 of 2, T4 2 of 2 → H100 or T4.
		{name: "several hold it empty, fewer now", empty: every,
			free: fit(2, ModelCount{a100, 1}, ModelCount{h100, 2}, ModelCount{t4, 2}), want: []string{h100, t4}},
		{name: "none holds it now: wait for those that hold it empty", empty: every,
			free: fit(2, ModelCount{a100, 1}, ModelCount{h100, 0}, ModelCount{t4, 1}), want: []string{a100, h100, t4}},
		{name: "a pod is placed: follow its model", empty: every,
			free: fit(2, ModelCount{a100, 2}), placed: []string{t4}, want: []string{t4}},
		{name: "a placed pod's model named in another case", empty: every, placed: []string{"TESLA-T4"}, want: []string{"TESLA-T4"}},
		// A pod placed on a model that does not hold the gang (placed before
		// the rule, or by hand): the rest go to the models that do.
		{name: "placed on a model that does not hold the gang", empty: onlyA100, placed: []string{t4}, want: []string{a100}},
		// 3 pods of 8: A100 2 of 3, H100 1 of 3, T4 0 of 3.
		{name: "no model holds the gang: any, reported", empty: fit(3, ModelCount{a100, 2}, ModelCount{h100, 1}, ModelCount{t4, 0}),
			want: nil, noneHolds: true},
		{name: "a cluster of one model that does not hold it: any, not reported", empty: fit(3, ModelCount{a100, 2}), want: nil},
		{name: "no models known (DRA GPUs): any", empty: fit(3), want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, noneHolds := ChooseModels(tt.empty, tt.free, tt.placed)
			if !slices.Equal(got, tt.want) || noneHolds != tt.noneHolds {
				t.Errorf("got %q, %v; want %q, %v", got, noneHolds, tt.want, tt.noneHolds)
			}
		})
	}
}

// TestFitEmptyWithDRANodes: nodes whose GPUs only a DRA driver publishes
// count as Node-described ones do, per model too, and two nodes of one
// DRA inventory are two nodes, not one.
func TestFitEmptyWithDRANodes(t *testing.T) {
	cluster := Cluster{
		Nodes: []*v1.Node{gt.MakeGPUNode("t4-0").GFD(t4, 4, 15360).Obj()},
		DRA: []*gpu.NodeGPUs{
			gt.EmptyDRAView("dra-a100-0", a100, 8),
			gt.EmptyDRAView("dra-h100-0", h100, 8),
			gt.EmptyDRAView("dra-h100-1", h100, 8),
		},
	}
	// 4 pods of 4 GPUs: A100 8 → 2, H100 2 × 8 → 4, T4 4 → 1; the whole
	// cluster (8 + 16 + 4 = 28 GPUs) holds all 4.
	demands := repeat(whole(4), 4)
	if fit := FitEmpty(cluster, demands, 4); !fit.Fits() || fit.ClusterMilli != 28*gpu.MilliPerGPU {
		t.Errorf("FitEmpty: %d of %d placed, cluster %d milli; want 4 of 4, 28000", fit.Placed, fit.Needed, fit.ClusterMilli)
	}
	byModel := FitEmptyByModel(cluster, demands, 4)
	if want := []ModelCount{{a100, 2}, {h100, 4}, {t4, 1}}; !slices.Equal(byModel.Models, want) {
		t.Errorf("FitEmptyByModel: %v, want %v", byModel.Models, want)
	}
	if h := byModel.Holding(); !slices.Equal(h, []string{h100}) {
		t.Errorf("holding %q, want [%s]", h, h100)
	}
	// 5 pods of 4 GPUs on the H100s alone: 2 nodes × 2 = 4 placed.
	if fit := FitEmpty(Cluster{DRA: cluster.DRA[1:]}, repeat(whole(4), 5), 5); fit.Placed != 4 {
		t.Errorf("two H100 nodes of one inventory placed %d pods of 4 GPUs, want 4", fit.Placed)
	}
}
