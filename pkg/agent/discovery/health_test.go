package discovery_test

import (
	"context"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpusched/gpusched/pkg/agent/discovery"
	"github.com/gpusched/gpusched/pkg/agent/nvmlmock"
	"github.com/gpusched/gpusched/pkg/gpu"
)

// TestNVMLXIDMarksUnhealthy: a critical XID event marks the GPU (or the one
// MIG device it names) unhealthy in the published annotation, with the XID
// and the time; an application XID marks nothing.
func TestNVMLXIDMarksUnhealthy(t *testing.T) {
	at := time.Date(2026, 11, 24, 10, 2, 11, 0, time.UTC)
	const reason79 = "XID 79 at 2026-11-24T10:02:11Z"
	const reason48 = "XID 48 at 2026-11-24T10:02:11Z"
	tests := []struct {
		name        string
		mig         bool // GPU 1 runs MIG with two 1g instances
		gpu         int
		xid         uint64
		gpuInstance uint32
		// wantUnhealthy maps published device index to its mark; the others
		// must stay healthy.
		wantUnhealthy map[int]string
		wantCritical  bool
	}{
		{name: "XID 79 on GPU 2", gpu: 2, xid: 79, gpuInstance: 0xFFFFFFFF,
			wantUnhealthy: map[int]string{2: reason79}, wantCritical: true},
		{name: "XID 13 is an application error", gpu: 2, xid: 13, gpuInstance: 0xFFFFFFFF,
			wantUnhealthy: map[int]string{}},
		{name: "XID 68 is an application error", gpu: 0, xid: 68, gpuInstance: 0xFFFFFFFF,
			wantUnhealthy: map[int]string{}},
		// Devices: 0 = GPU 0, 2000 and 2010 = GPU 1's MIG instances 0 and 1
		// (1000 × (1+1) + 10 × instance), 2 = GPU 2, ...
		{name: "XID 48 in one MIG instance marks that instance", mig: true, gpu: 1, xid: 48, gpuInstance: 1,
			wantUnhealthy: map[int]string{2010: reason48}, wantCritical: true},
		{name: "XID 79 on a MIG GPU marks all its instances", mig: true, gpu: 1, xid: 79, gpuInstance: 0xFFFFFFFF,
			wantUnhealthy: map[int]string{2000: reason79, 2010: reason79}, wantCritical: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := nvmlmock.DGXA100()
			if tt.mig {
				if err := m.EnableMIG(1, nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.GPU_INSTANCE_PROFILE_1_SLICE); err != nil {
					t.Fatal(err)
				}
			}
			client := fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}})
			var mu sync.Mutex
			var seen []uint64
			var critical []bool
			p := &discovery.Publisher{Lib: m, Nodes: client.CoreV1().Nodes(), NodeName: nodeName, Store: &discovery.Store{},
				Health: discovery.NewHealth(), Interval: time.Hour, Now: func() time.Time { return at },
				OnXID: func(xid uint64, c bool) {
					mu.Lock()
					defer mu.Unlock()
					seen, critical = append(seen, xid), append(critical, c)
				}}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan struct{})
			go func() { _ = p.Run(ctx); close(done) }()
			defer func() { cancel(); <-done }()
			waitFor(t, func() bool { return annotation(t, client) != "" })

			m.InjectXID(tt.gpu, tt.xid, tt.gpuInstance)
			waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) == 1 })
			if !reflect.DeepEqual(critical, []bool{tt.wantCritical}) || seen[0] != tt.xid {
				t.Fatalf("OnXID saw %v critical %v, want [%d] [%v]", seen, critical, tt.xid, tt.wantCritical)
			}
			if n := len(tt.wantUnhealthy); n > 0 {
				waitFor(t, func() bool { return strings.Count(annotation(t, client), `"unhealthy"`) == n })
			} else {
				time.Sleep(50 * time.Millisecond) // give a wrong mark the time to show
			}
			inv, err := gpu.InventoryFromNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{
				Annotations: map[string]string{gpu.AnnotationDevices: annotation(t, client)}}})
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range inv.Devices {
				if d.Unhealthy != tt.wantUnhealthy[d.Index] {
					t.Errorf("device %d (%s) unhealthy %q, want %q", d.Index, d.UUID, d.Unhealthy, tt.wantUnhealthy[d.Index])
				}
			}
		})
	}
}

// TestNVMLParseXIDs: the --critical-xids flag's format.
func TestNVMLParseXIDs(t *testing.T) {
	tests := []struct {
		in      string
		want    []uint64
		wantErr string
	}{
		{in: "48,79, 95", want: []uint64{48, 79, 95}},
		{in: "", want: nil},
		{in: "79,x", wantErr: `critical XID "x": want a positive integer`},
		{in: "0", wantErr: `critical XID "0"`},
		{in: "-1", wantErr: `critical XID "-1"`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := discovery.ParseXIDs(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseXIDs(%q) error %v, want %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("ParseXIDs(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			}
		})
	}
}

// TestXIDSupport: the GPUs whose health the agent cannot watch are named
// with why; the others are registered.
func TestXIDSupport(t *testing.T) {
	m := nvmlmock.DGXA100()
	m.Devices[3].(*server.Device).GetSupportedEventTypesFunc = func() (uint64, nvml.Return) { return 0, nvml.SUCCESS }
	m.Devices[5].(*server.Device).RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.ERROR_NOT_SUPPORTED }
	if ret := m.Init(); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	machine, err := discovery.Discover(m, discovery.Options{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := discovery.XIDSupport(m, machine)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		nvmlmock.GPUUUID(3): "GPU does not report XID events",
		nvmlmock.GPUUUID(5): "registering for XID events failed (nvml ERROR_NOT_SUPPORTED)",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("unwatched GPUs %v, want %v", got, want)
	}
}
