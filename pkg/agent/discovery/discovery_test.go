package discovery_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpusched/gpusched/pkg/agent/discovery"
	"github.com/gpusched/gpusched/pkg/agent/nvmlmock"
	"github.com/gpusched/gpusched/pkg/gpu"
)

const nodeName = "gpu-node-0"

// nvmlDevice is one GPU of a mock machine, whose NVML calls a test may replace.
type nvmlDevice = server.Device

// publish runs one publisher round against a fake API server holding the
// node, and returns the gpu.Devices the engine reads back from the Node.
func publish(t *testing.T, m *nvmlmock.Machine, labels map[string]string, health *discovery.Health) (*discovery.Snapshot, []gpu.Device) {
	t.Helper()
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, Labels: labels}}
	client := fake.NewClientset(node)
	if health == nil {
		health = discovery.NewHealth()
	}
	p := &discovery.Publisher{Lib: m, Nodes: client.CoreV1().Nodes(), NodeName: nodeName, Store: &discovery.Store{}, Health: health}
	snap, err := p.Sync(context.Background())
	if err != nil {
		t.Fatalf("Sync: %v", err)
	}
	got, err := client.CoreV1().Nodes().Get(context.Background(), nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	inv, err := gpu.InventoryFromNode(got)
	if err != nil {
		t.Fatalf("the engine refuses the published annotation %q: %v", got.Annotations[gpu.AnnotationDevices], err)
	}
	return snap, inv.Devices
}

// TestNVMLDiscoverMockMachines: every GPU of go-nvml's DGX mocks, published
// and read back by the engine, field by field.
func TestNVMLDiscoverMockMachines(t *testing.T) {
	tests := []struct {
		name      string
		machine   *nvmlmock.Machine
		model     string
		memoryMiB int64
	}{
		// go-nvml's A100 mock calls itself "Mock NVIDIA A100-SXM4-40GB";
		// GFD's rule (spaces to dashes) keeps the prefix.
		{"dgxa100", nvmlmock.DGXA100(), "Mock-NVIDIA-A100-SXM4-40GB", 40960},
		{"dgxh100", nvmlmock.DGXH100(), "NVIDIA-H100-80GB-HBM3", 81920},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			snap, devices := publish(t, tt.machine, nil, nil)
			if len(devices) != 8 {
				t.Fatalf("%d devices published, want 8", len(devices))
			}
			for i, d := range devices {
				want := gpu.Device{Index: i, UUID: nvmlmock.GPUUUID(i), Model: tt.model, MemoryMiB: tt.memoryMiB, Group: "nvlink-0"}
				if d != want {
					t.Errorf("device %d = %+v, want %+v", i, d, want)
				}
				g := snap.Machine.GPUs[i]
				wantBus := fmt.Sprintf("0000:%02x:00.0", i)
				wantNUMA := 0 // GPUs 0-3 on NUMA node 0, 4-7 on node 1
				if i >= 4 {
					wantNUMA = 1
				}
				if g.Minor != i || g.PCIBusID != wantBus || g.NUMANode != wantNUMA || g.MIGEnabled || snap.NUMANodes[i] != wantNUMA {
					t.Errorf("GPU %d: minor %d, bus %q, NUMA %d (snapshot %d), MIG %v; want minor %d, bus %q, NUMA %d, MIG off",
						i, g.Minor, g.PCIBusID, g.NUMANode, snap.NUMANodes[i], g.MIGEnabled, i, wantBus, wantNUMA)
				}
			}
		})
	}
}

// TestNVMLGroups: NVLink peering becomes interconnect groups, named after
// the GFD clique when the node has one.
func TestNVMLGroups(t *testing.T) {
	tests := []struct {
		name   string
		island func(int) int
		clique string
		want   []string // group of GPU 0..7
	}{
		{"one NVSwitch fabric", nvmlmock.AllPeers, "", rep("nvlink-0", 8)},
		{"PCIe cards without NVLink", nvmlmock.NoNVLink, "", rep("", 8)},
		{"NVLink bridges between pairs", nvmlmock.Pairs, "",
			[]string{"nvlink-0", "nvlink-0", "nvlink-1", "nvlink-1", "nvlink-2", "nvlink-2", "nvlink-3", "nvlink-3"}},
		{"one fabric in a multi-node clique takes the clique's name", nvmlmock.AllPeers, "7c2f.3", rep("7c2f.3", 8)},
		{"several islands in a clique", nvmlmock.Pairs, "7c2f.3",
			[]string{"7c2f.3-nvlink-0", "7c2f.3-nvlink-0", "7c2f.3-nvlink-1", "7c2f.3-nvlink-1",
				"7c2f.3-nvlink-2", "7c2f.3-nvlink-2", "7c2f.3-nvlink-3", "7c2f.3-nvlink-3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var labels map[string]string
			if tt.clique != "" {
				labels = map[string]string{gpu.LabelClique: tt.clique}
			}
			_, devices := publish(t, nvmlmock.New(dgxh100.New(), tt.island), labels, nil)
			for i, d := range devices {
				if d.Group != tt.want[i] {
					t.Errorf("GPU %d group %q, want %q", i, d.Group, tt.want[i])
				}
			}
		})
	}
}

func rep(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// TestNVMLMIGOnAndOff: a MIG-enabled GPU is published as its MIG devices
// (each with its MIG UUID, memory and GFD-style model), in its place; when
// MIG is switched off the GPU comes back whole.
func TestNVMLMIGOnAndOff(t *testing.T) {
	m := nvmlmock.DGXA100()
	if err := m.EnableMIG(1, nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.GPU_INSTANCE_PROFILE_3_SLICE); err != nil {
		t.Fatal(err)
	}
	snap, devices := publish(t, m, nil, nil)
	// 8 GPUs, GPU 1 replaced by 3 MIG devices: 10 devices.
	if len(devices) != 10 {
		t.Fatalf("%d devices, want 10: %+v", len(devices), devices)
	}
	mig := snap.Machine.GPUs[1].MIG
	want := []gpu.Device{
		{Index: 0, UUID: nvmlmock.GPUUUID(0), Model: "Mock-NVIDIA-A100-SXM4-40GB", MemoryMiB: 40960, Group: "nvlink-0"},
		// A100-40GB profiles: 1g.5gb is 4864 MiB, 3g.20gb 19968 MiB; MIG devices have no NVLink group.
		// Their indices: 1000 × (GPU 1 + 1) + 10 × GPU instance + compute instance 0.
		{Index: 2000, UUID: mig[0].UUID, Model: "Mock-NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", MemoryMiB: 4864},
		{Index: 2010, UUID: mig[1].UUID, Model: "Mock-NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", MemoryMiB: 4864},
		{Index: 2020, UUID: mig[2].UUID, Model: "Mock-NVIDIA-A100-SXM4-40GB-MIG-3g.20gb", MemoryMiB: 19968},
		// GPU 2 keeps its index: the MIG devices before it take none of it.
		{Index: 2, UUID: nvmlmock.GPUUUID(2), Model: "Mock-NVIDIA-A100-SXM4-40GB", MemoryMiB: 40960, Group: "nvlink-0"},
	}
	for i, w := range want {
		if devices[i] != w {
			t.Errorf("device %d = %+v, want %+v", i, devices[i], w)
		}
	}
	for i, d := range mig {
		if !strings.HasPrefix(d.UUID, "MIG-") || d.GPUInstanceID != i {
			t.Errorf("MIG device %d: UUID %q, GPU instance %d", i, d.UUID, d.GPUInstanceID)
		}
	}
	if snap.NUMANodes[3] != 0 {
		t.Errorf("MIG device NUMA node %d, want its parent's 0", snap.NUMANodes[3])
	}

	if err := m.DisableMIG(1); err != nil {
		t.Fatal(err)
	}
	_, devices = publish(t, m, nil, nil)
	if len(devices) != 8 || devices[1].UUID != nvmlmock.GPUUUID(1) || devices[1].MemoryMiB != 40960 {
		t.Fatalf("after MIG off: %d devices, device 1 = %+v", len(devices), devices[1])
	}
}

// TestNVMLMIGProfileNames: profile names from instance memory, as
// nvidia-smi prints them, on 40, 80 and 141 GB GPUs.
func TestNVMLMIGProfileNames(t *testing.T) {
	tests := []struct {
		machine *nvmlmock.Machine
		profile int
		want    string
	}{
		{nvmlmock.DGXA100(), nvml.GPU_INSTANCE_PROFILE_7_SLICE, "7g.40gb"}, // 40192/40960 MiB = 7.85/8 -> 8/8 of 40 GB
		{nvmlmock.DGXH100(), nvml.GPU_INSTANCE_PROFILE_1_SLICE, "1g.10gb"}, // 9856/81920 = 0.96/8 -> 1/8 of 80 GB
		{nvmlmock.DGXH100(), nvml.GPU_INSTANCE_PROFILE_7_SLICE, "7g.80gb"}, // 80384/81920 -> 8/8 of 80 GB
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if err := tt.machine.EnableMIG(0, tt.profile); err != nil {
				t.Fatal(err)
			}
			snap, _ := publish(t, tt.machine, nil, nil)
			if got := snap.Machine.GPUs[0].MIG[0].Profile; got != tt.want {
				t.Fatalf("profile %q, want %q", got, tt.want)
			}
		})
	}
}

// TestNVMLGPUVanishes: a GPU that falls off the bus stays in the annotation
// at its index, unhealthy ("lost"), so pods on it keep holding it and no
// other GPU takes its index; the GPUs after it, which NVML now numbers one
// lower, keep theirs (their minor numbers). When it comes back it is healthy
// again. GPUs that a MIG reconfiguration replaces are gone, not lost.
func TestNVMLGPUVanishes(t *testing.T) {
	m := nvmlmock.DGXH100()
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}
	client := fake.NewClientset(node)
	store := &discovery.Store{}
	changes, unsubscribe := store.Subscribe()
	defer unsubscribe()
	at := time.Date(2026, 11, 24, 10, 2, 11, 0, time.UTC)
	p := &discovery.Publisher{Lib: m, Nodes: client.CoreV1().Nodes(), NodeName: nodeName, Store: store, Health: discovery.NewHealth(),
		Now: func() time.Time { return at }}
	if _, err := p.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-changes
	m.RemoveGPU(3)
	if _, err := p.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changes:
	default:
		t.Fatal("the store did not announce the change")
	}
	published := func() []gpu.Device {
		got, _ := client.CoreV1().Nodes().Get(context.Background(), nodeName, metav1.GetOptions{})
		var devices []gpu.Device
		if err := json.Unmarshal([]byte(got.Annotations[gpu.AnnotationDevices]), &devices); err != nil {
			t.Fatal(err)
		}
		return devices
	}
	devices := published()
	if len(devices) != 8 {
		t.Fatalf("%d devices after GPU 3 vanished, want 8 (the lost one kept)", len(devices))
	}
	for i, d := range devices {
		want := ""
		if i == 3 {
			want = "lost: not reported by NVML since 2026-11-24T10:02:11Z"
		}
		if d.Index != i || d.UUID != nvmlmock.GPUUUID(i) || d.Unhealthy != want {
			t.Errorf("device %d = index %d UUID %s unhealthy %q, want index %d UUID %s unhealthy %q",
				i, d.Index, d.UUID, d.Unhealthy, i, nvmlmock.GPUUUID(i), want)
		}
	}
	if got := store.Current().Minor(nvmlmock.GPUUUID(3)); got != 3 {
		t.Errorf("the lost GPU's minor is %d, want 3 (the agent still denies it to other pods)", got)
	}

	// A MIG reconfiguration of GPU 5 replaces it: gone, not lost.
	if err := m.EnableMIG(5, nvml.GPU_INSTANCE_PROFILE_1_SLICE); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, d := range published() {
		if d.UUID == nvmlmock.GPUUUID(5) {
			t.Errorf("GPU 5, now split by MIG, is still published: %+v", d)
		}
	}
}

// TestNVMLNUMAFromSysfs: a driver that does not answer the NUMA query is
// read from sysfs, with NVML's 8-digit PCI domain shortened to 4.
func TestNVMLNUMAFromSysfs(t *testing.T) {
	m := nvmlmock.New(dgxa100.New(), nvmlmock.AllPeers)
	root := t.TempDir()
	dev := m.Devices[0].(*nvmlDevice)
	dev.GetNumaNodeIdFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
	dir := filepath.Join(root, "bus", "pci", "devices", "0000:00:00.0")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "numa_node"), []byte("3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := discovery.Discover(m, discovery.Options{SysfsRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	if got.GPUs[0].NUMANode != 3 {
		t.Fatalf("NUMA node %d, want 3 from sysfs", got.GPUs[0].NUMANode)
	}
	dev2 := m.Devices[1].(*nvmlDevice)
	dev2.GetNumaNodeIdFunc = dev.GetNumaNodeIdFunc // no sysfs entry either: unknown
	got, _ = discovery.Discover(m, discovery.Options{SysfsRoot: root})
	if got.GPUs[1].NUMANode != -1 {
		t.Fatalf("NUMA node %d, want -1 when neither NVML nor sysfs knows", got.GPUs[1].NUMANode)
	}
}

// TestNVMLUnreadableGPU: a GPU whose UUID cannot be read is left out and
// named in the error; the others are still published.
func TestNVMLUnreadableGPU(t *testing.T) {
	m := nvmlmock.DGXH100()
	m.Devices[5].(*nvmlDevice).GetUUIDFunc = func() (string, nvml.Return) { return "", nvml.ERROR_GPU_IS_LOST }
	got, err := discovery.Discover(m, discovery.Options{})
	if err == nil || !strings.Contains(err.Error(), "NVML index 5") || !strings.Contains(err.Error(), "ERROR_GPU_IS_LOST") {
		t.Fatalf("error %v, want one naming NVML index 5 and ERROR_GPU_IS_LOST", err)
	}
	if got == nil || len(got.GPUs) != 7 {
		t.Fatalf("machine %+v, want the 7 readable GPUs", got)
	}
}

// TestAgentPublisherRunStops: Run keeps the annotation on the Node (it puts
// it back after someone removes it) and returns once its context is done.
func TestAgentPublisherRunStops(t *testing.T) {
	m := nvmlmock.DGXH100()
	client := fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}})
	p := &discovery.Publisher{Lib: m, Nodes: client.CoreV1().Nodes(), NodeName: nodeName, Store: &discovery.Store{},
		Health: discovery.NewHealth(), Interval: 20 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()

	waitFor(t, func() bool { return annotation(t, client) != "" })
	if _, err := client.CoreV1().Nodes().Patch(context.Background(), nodeName, "application/merge-patch+json",
		[]byte(`{"metadata":{"annotations":{"gpusched.io/gpu-devices":null}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return annotation(t, client) != "" })

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run returned %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after its context was cancelled")
	}
}

func annotation(t *testing.T, client *fake.Clientset) string {
	t.Helper()
	n, err := client.CoreV1().Nodes().Get(context.Background(), nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n.Annotations[gpu.AnnotationDevices]
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
