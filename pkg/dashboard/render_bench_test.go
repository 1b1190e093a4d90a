package dashboard

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/gpusched/gpusched/internal/chromiumtest"
	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

// syntheticCluster is n nodes of 8 GPUs in 5 pools (A100s in three, H100s
// and L40Ss in one each), one GPU in 200 unhealthy, with pods on them: per
// GPU, 40% held whole, 25% by one to three 250m shares, the rest free; and
// pending pods, one per 5 nodes, turned down for one of three GPU reasons.
// The same seed gives the same cluster; shift moves every allocation by one
// GPU, as an update that touches every node.
func syntheticCluster(n int, seed uint64, shift int) ([]*v1.Node, []*v1.Pod) {
	r := rand.New(rand.NewPCG(seed, 7))
	models := []string{"NVIDIA-A100-SXM4-80GB", "NVIDIA-A100-SXM4-80GB", "NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3", "NVIDIA-L40S"}
	var nodes []*v1.Node
	var pods []*v1.Pod
	for i := range n {
		name := fmt.Sprintf("gpu-node-%05d", i)
		model := models[i%len(models)]
		devices := make([]gpu.Device, 8)
		for j := range devices {
			devices[j] = gpu.Device{Index: j, Model: model, MemoryMiB: 81920}
			if r.IntN(200) == 0 {
				devices[j].Unhealthy = "XID 79"
			}
		}
		nodes = append(nodes, gt.MakeGPUNode(name).Label("karpenter.sh/nodepool", fmt.Sprintf("pool-%c", 'a'+i%5)).Devices(devices...).Obj())
		for j := range 8 {
			dev := (j + shift) % 8
			switch x := r.IntN(100); {
			case x < 40:
				pods = append(pods, gt.MakeGPUPod(fmt.Sprintf("%s-w%d", name, j)).GPUs(1).Node(name).
					Assigned(gpu.Assignment{Node: name, Devices: []int{dev}, Milli: 1000}).Obj())
			case x < 65:
				for k := range 1 + r.IntN(3) {
					pods = append(pods, gt.MakeGPUPod(fmt.Sprintf("%s-s%d-%d", name, j, k)).Milli(250).GPUMemory("8Gi").Node(name).
						Assigned(gpu.Assignment{Node: name, Devices: []int{dev}, Milli: 250, MemoryMiB: 8192}).Obj())
				}
			}
		}
	}
	reasons := []string{"insufficient free GPUs", "insufficient free GPU share", "too few GPUs on node"}
	for i := range n / 5 {
		p := gt.MakeGPUPod(fmt.Sprintf("pending-%05d", i)).GPUs(1 + r.IntN(8)).Priority(int32(r.IntN(3))).Obj()
		p.Status.Conditions = []v1.PodCondition{{Type: v1.PodScheduled, Status: v1.ConditionFalse,
			Message: fmt.Sprintf("0/%d nodes are available: %d %s.", n, n, reasons[i%len(reasons)])}}
		pods = append(pods, p)
	}
	return nodes, pods
}

// BenchmarkDashboardSnapshot: the server's work per change of a 5000-node,
// 40000-GPU cluster: gpuview's snapshot, then the page's JSON (reported
// with its size plain and gzipped).
func BenchmarkDashboardSnapshot(b *testing.B) {
	nodes, pods := syntheticCluster(5000, 1, 0)
	s := New(nil, Options{})
	b.ResetTimer()
	var plain, gz int
	for b.Loop() {
		s.Publish(nodes, pods)
		body, zipped, _, err := s.state.encoded()
		if err != nil {
			b.Fatal(err)
		}
		plain, gz = len(body), len(zipped)
	}
	b.ReportMetric(float64(plain)/1e6, "json-MB")
	b.ReportMetric(float64(gz)/1e6, "gzip-MB")
}

// BenchmarkDashboardRender has headless Chromium load the page for a
// 5000-node, 40000-GPU cluster with 1000 pending pods and reports what the
// page measured itself (performance.now(), data attributes of <body>):
// first-render-ms from navigation start to the map, pending list and
// summary drawn; first-fetch-ms and first-draw-ms its request+decode and
// drawing parts; update-ms and update-draw-ms the same for an update in
// which every node changed (the server publishes it after serving the
// first snapshot). Each iteration is a fresh browser. Needs chromium on
// PATH (chromiumtest.Path).
func BenchmarkDashboardRender(b *testing.B) {
	chromium := chromiumtest.Path(b)
	nodes, pods := syntheticCluster(5000, 1, 0)
	nodes2, pods2 := syntheticCluster(5000, 1, 1)
	s := New(nil, Options{})
	first, update := s.build(nodes, pods, nil), s.build(nodes2, pods2, nil)
	var served atomic.Int32
	handler := s.Handler()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handler.ServeHTTP(w, r)
		if r.URL.Path == "/api/snapshot" && served.Add(1) == 1 {
			s.state.Publish(update, time.Now())
		}
	})}
	go srv.Serve(ln)
	defer srv.Close()
	url := "http://" + ln.Addr().String() + "/?bench=1"

	sums := map[string]float64{}
	attrs := []string{"first-render-ms", "first-fetch-ms", "first-draw-ms", "update-ms", "update-draw-ms"}
	b.ResetTimer()
	for b.Loop() {
		served.Store(0)
		s.state.Publish(first, time.Now())
		dom := chromiumtest.Run(context.Background(), b, chromium, "--window-size=1600,1000", "--dump-dom", url)
		for _, a := range attrs {
			m := regexp.MustCompile(`<body[^>]* data-` + a + `="([0-9.]+)"`).FindStringSubmatch(dom)
			if m == nil {
				b.Fatalf("the page recorded no %s:\n%.2000s", a, dom)
			}
			v, _ := strconv.ParseFloat(m[1], 64)
			sums[a] += v
		}
		if m := regexp.MustCompile(`data-phases-ms="([^"]*)"`).FindStringSubmatch(dom); m != nil {
			b.Logf("phases of the last draw (ms): %s", m[1])
		}
		if !regexp.MustCompile(`data-drawn-nodes="5000"`).MatchString(dom) {
			b.Fatal("the map did not draw 5000 nodes")
		}
	}
	for _, a := range attrs {
		b.ReportMetric(sums[a]/float64(b.N), a)
	}
}
