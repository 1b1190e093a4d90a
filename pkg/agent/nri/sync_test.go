package nri_test

import (
	"context"
	"net"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	dto "github.com/prometheus/client_model/go"

	"github.com/gpusched/gpusched/pkg/agent/discovery"
	"github.com/gpusched/gpusched/pkg/agent/metrics"
	agentnri "github.com/gpusched/gpusched/pkg/agent/nri"
	"github.com/gpusched/gpusched/pkg/gpu"
)

// TestNRIAgentRestartSynchronize: after an agent restart, NRI's Synchronize
// rebuilds the agent's view of running containers with their GPUs; a
// container created while the agent was down (so without its adjustment) is
// reported as unverified and holds every GPU it can reach; a removed
// container leaves the view.
func TestNRIAgentRestartSynchronize(t *testing.T) {
	r := startRuntime(t)
	store := eightGPUs(t)
	cfg := agentnri.Config{NodeName: thisNode, Mode: agentnri.ModeEnv}
	_, stop := startAgent(t, r, cfg, store)

	whole := pod("ml", "train", map[string]string{gpu.AnnotationAssigned: "node=" + thisNode + ";gpus=0,1;uuids=" + uuid(0) + "," + uuid(1)})
	share := pod("ml", "infer", map[string]string{gpu.AnnotationMilli: "500", gpu.AnnotationAssigned: "node=" + thisNode + ";gpus=4;milli=500"})
	web := pod("web", "frontend", nil)
	for _, c := range []struct {
		pod *api.PodSandbox
		ctr *api.Container
	}{{whole, container("c1")}, {whole, container("c2")}, {share, container("c3")}, {web, container("c4")}} {
		if _, err := r.create(c.pod, c.ctr); err != nil {
			t.Fatal(err)
		}
	}
	// The runtime applies the adjustment: the running container carries it.
	r.ctrs["c1"].Env = []string{"NVIDIA_VISIBLE_DEVICES=" + uuid(0) + "," + uuid(1)}
	r.ctrs["c2"].Env = []string{"NVIDIA_VISIBLE_DEVICES=" + uuid(0) + "," + uuid(1)}
	r.ctrs["c3"].Env = []string{"NVIDIA_VISIBLE_DEVICES=" + uuid(4)}
	r.ctrs["c4"].Env = []string{"NVIDIA_VISIBLE_DEVICES=void"}

	stop()
	// While the agent is down the runtime creates containers without it: the
	// image's default stays. (A request that meets the closing connection
	// fails, by the plugin's failure policy; the kubelet would retry.)
	late := pod("ml", "late", map[string]string{gpu.AnnotationAssigned: "node=" + thisNode + ";gpus=6"})
	var err error
	for range 50 {
		if _, err = r.create(late, container("c5", "NVIDIA_VISIBLE_DEVICES=all")); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}

	m := metrics.New()
	p, err := agentnri.New(cfg, store, m)
	if err != nil {
		t.Fatal(err)
	}
	restart(t, r, p)
	want := []agentnri.Record{
		{ID: "c1", Pod: "ml/train", PodUID: "uid-train", Sandbox: "sandbox-ml-train", UUIDs: []string{uuid(0), uuid(1)}, Milli: 1000},
		{ID: "c2", Pod: "ml/train", PodUID: "uid-train", Sandbox: "sandbox-ml-train", UUIDs: []string{uuid(0), uuid(1)}, Milli: 1000},
		{ID: "c3", Pod: "ml/infer", PodUID: "uid-infer", Sandbox: "sandbox-ml-infer", UUIDs: []string{uuid(4)}, Milli: 500},
		{ID: "c4", Pod: "web/frontend", PodUID: "uid-frontend", Sandbox: "sandbox-web-frontend"},
		// Created without the agent, with the image's all: it holds every GPU.
		{ID: "c5", Pod: "ml/late", PodUID: "uid-late", Sandbox: "sandbox-ml-late",
			UUIDs: []string{uuid(0), uuid(1), uuid(2), uuid(3), uuid(4), uuid(5), uuid(6), uuid(7)}, Milli: 1000, Unverified: true},
	}
	if got := p.Containers(); !reflect.DeepEqual(got, want) {
		t.Fatalf("view after restart:\n%+v\nwant\n%+v", got, want)
	}
	if got := gauge(t, m, "gpusched_agent_unverified_containers"); got != 1 {
		t.Errorf("unverified_containers = %v, want 1", got)
	}

	b := r.nri.BlockPluginSync()
	err = r.nri.RemoveContainer(context.Background(), &api.RemoveContainerRequest{Pod: whole, Container: r.ctrs["c2"]})
	b.Unblock()
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Containers(); len(got) != 4 || got[1].ID != "c3" {
		t.Fatalf("view after c2 was removed: %+v", got)
	}
}

// TestNRIReconnectsAfterRuntimeRestart: when the runtime restarts, the
// agent's plugin notices, reconnects to the new runtime on the same socket,
// synchronizes and handles containers again.
func TestNRIReconnectsAfterRuntimeRestart(t *testing.T) {
	dir := t.TempDir()
	r := startRuntimeIn(t, dir)
	p, err := agentnri.New(agentnri.Config{NodeName: thisNode, Mode: agentnri.ModeEnv}, eightGPUs(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	// The plugin's connections, so the test can cut them as a runtime that
	// exits does (the in-process adaptation's Stop leaves them open).
	var mu sync.Mutex
	var conns []net.Conn
	dial := stub.WithDialer(func(path string) (net.Conn, error) {
		c, err := net.Dial("unix", path)
		if err == nil {
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
		return c, err
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = p.Run(ctx, r.socket, 20*time.Millisecond, dial); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	waitReady(t, p)

	r.nri.Stop()
	mu.Lock()
	for _, c := range conns {
		c.Close()
	}
	mu.Unlock()
	deadline := time.Now().Add(5 * time.Second)
	for p.Ready() {
		if time.Now().After(deadline) {
			t.Fatal("the plugin still reports ready 5s after the runtime stopped")
		}
		time.Sleep(5 * time.Millisecond)
	}
	r2 := startRuntimeIn(t, dir)
	waitReady(t, p)
	adj, err := r2.create(pod("ml", "after", map[string]string{gpu.AnnotationAssigned: "node=" + thisNode + ";gpus=3"}), container("c"))
	if err != nil {
		t.Fatal(err)
	}
	if env := adj.GetEnv(); len(env) != 1 || env[0].GetValue() != uuid(3) {
		t.Fatalf("after the runtime restart the container got %v, want NVIDIA_VISIBLE_DEVICES=%s", env, uuid(3))
	}
}

// TestNRIRejectionMetrics: refusals are counted by reason, handled
// containers by outcome.
func TestNRIRejectionMetrics(t *testing.T) {
	r := startRuntime(t)
	m := metrics.New()
	p, err := agentnri.New(agentnri.Config{NodeName: thisNode, Mode: agentnri.ModeEnv}, eightGPUs(t), m)
	if err != nil {
		t.Fatal(err)
	}
	restart(t, r, p)
	creates := []struct {
		pod *api.PodSandbox
		ok  bool
	}{
		{pod("ml", "a", map[string]string{gpu.AnnotationAssigned: "node=" + thisNode + ";gpus=1"}), true},
		{pod("ml", "b", nil), true},
		{pod("gpu-operator", "c", map[string]string{agentnri.AnnotationUnrestricted: "true"}), true},
		{pod("ml", "d", map[string]string{gpu.AnnotationMilli: "100"}), false},
		{pod("ml", "e", map[string]string{gpu.AnnotationAssigned: "node=other;gpus=1"}), false},
		{pod("ml", "f", map[string]string{gpu.AnnotationAssigned: "node=other;gpus=1"}), false},
	}
	for i, c := range creates {
		_, err := r.create(c.pod, container("m"+string(rune('0'+i))))
		if (err == nil) != c.ok {
			t.Fatalf("create %d: error %v, want success %v", i, err, c.ok)
		}
	}
	for _, tt := range []struct {
		name, label, value string
		want               float64
	}{
		{"gpusched_agent_containers_total", "outcome", metrics.OutcomeGPUs, 1},
		{"gpusched_agent_containers_total", "outcome", metrics.OutcomeNoGPUs, 1},
		{"gpusched_agent_containers_total", "outcome", metrics.OutcomeExempt, 1},
		{"gpusched_agent_containers_total", "outcome", metrics.OutcomeRejected, 3},
		{"gpusched_agent_rejections_total", "reason", agentnri.ReasonMissing, 1},
		{"gpusched_agent_rejections_total", "reason", agentnri.ReasonForeignNode, 2},
	} {
		if got := counter(t, m, tt.name, tt.label, tt.value); got != tt.want {
			t.Errorf("%s{%s=%q} = %v, want %v", tt.name, tt.label, tt.value, got, tt.want)
		}
	}
}

// restart connects an already built plugin and waits for its Synchronize.
func restart(t *testing.T, r *runtime, p *agentnri.Plugin) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = p.Run(ctx, r.socket, 20*time.Millisecond); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	waitReady(t, p)
}

func family(t *testing.T, m *metrics.Metrics, name string) *dto.MetricFamily {
	t.Helper()
	families, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name {
			return f
		}
	}
	return nil
}

func gauge(t *testing.T, m *metrics.Metrics, name string) float64 {
	f := family(t, m, name)
	if f == nil || len(f.GetMetric()) == 0 {
		t.Fatalf("no metric %s", name)
	}
	return f.GetMetric()[0].GetGauge().GetValue()
}

func counter(t *testing.T, m *metrics.Metrics, name, label, value string) float64 {
	f := family(t, m, name)
	for _, metric := range f.GetMetric() {
		for _, l := range metric.GetLabel() {
			if l.GetName() == label && strings.EqualFold(l.GetValue(), value) {
				return metric.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestNRISynchronizeBeforeInventory: the agent registers before it knows the
// node's GPUs (so that no container is created without it); the running
// containers it learns at Synchronize then hold their GPUs as soon as the
// GPUs are known, so a stale assignment of one of them is refused.
func TestNRISynchronizeBeforeInventory(t *testing.T) {
	r := startRuntime(t)
	train := pod("ml", "train", map[string]string{gpu.AnnotationAssigned: "node=" + thisNode + ";gpus=0"})
	r.pods[train.Id] = train
	r.ctrs["t1"] = &api.Container{Id: "t1", Name: "t1", PodSandboxId: train.Id, State: api.ContainerState_CONTAINER_RUNNING,
		Env: []string{"NVIDIA_VISIBLE_DEVICES=" + uuid(0)}}
	store := &discovery.Store{}
	p, _ := startAgent(t, r, agentnri.Config{NodeName: thisNode, Mode: agentnri.ModeEnv}, store)
	if got := p.Containers(); len(got) != 1 || !got[0].Pending {
		t.Fatalf("view before the GPUs are known: %+v, want t1 pending", got)
	}
	store.Set(eightGPUs(t).Current())
	_, err := r.create(pod("ml", "stale", map[string]string{gpu.AnnotationAssigned: "node=" + thisNode + ";gpus=0"}), container("s1"))
	if err == nil || !strings.Contains(err.Error(), "is held by live pods ml/train") {
		t.Errorf("a second pod on train's GPU once the GPUs are known: %v, want refused", err)
	}
}
