package extender

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

// benchCluster is the view of nodes 8-GPU A100 nodes, each with GPUs 0-2
// taken whole and two shares on GPUs 3 and 4 (5 pods a node), as the
// informers would deliver it.
func benchCluster(b *testing.B, nodes int) (*Cluster, []*v1.Node, []string) {
	c := newCluster()
	objects := make([]*v1.Node, nodes)
	names := make([]string, nodes)
	for i := range nodes {
		name := fmt.Sprintf("gpu-node-%05d", i)
		names[i] = name
		objects[i] = gt.MakeGPUNode(name).GFD(a100, 8, 81920).Clique("nvl").ResourceVersion("1").Obj()
		c.onNode(objects[i])
		c.onPod(gt.MakeGPUPod(name + "-w").Node(name).Assigned(gpu.Assignment{Node: name, Devices: []int{0, 1, 2}, Milli: 1000}).Obj())
		for j, m := range []int64{300, 450} {
			c.onPod(gt.MakeGPUPod(fmt.Sprintf("%s-s%d", name, j)).Node(name).
				Assigned(gpu.Assignment{Node: name, Devices: []int{3 + j}, Milli: m, MemoryMiB: 4096}).Obj())
		}
	}
	return c, objects, names
}

// BenchmarkFilterPrioritize5000Nodes is what the extender adds to scheduling
// one pod at 5000 GPU nodes with nodeCacheCapable: true: the scheduler
// encodes the filter request (the pod and the node names), the extender
// decodes it, filters, encodes its answer, the scheduler decodes it; then the
// same for prioritize over the feasible nodes. One node changes before each
// cycle, as the previous pod's bind changes one, so one node's view is
// recomputed and the rest are read from the ledger's cache.
//
// The scheduler sends the extender the feasible nodes its own filters found,
// and stops looking once it has found percentageOfNodesToScore of them: by
// default 50 − nodes/125 percent (at least 5%), 10% or 500 names at 5000
// nodes (nodes-sent=500); 5000 names with percentageOfNodesToScore: 100
// (nodes-sent=5000). Each runs with FragFit, the fragmentation-aware policy
// PairFit builds on, and with BestFit, and is timed three ways:
//
//   - extender-only: the extender's HTTP handler alone, on requests encoded
//     once, answers discarded: what the extender process spends;
//   - handler: the same plus the scheduler's side, encoding each request and
//     decoding each answer, in one process (no network);
//   - loopback: over HTTP on 127.0.0.1 with a keep-alive client, as the
//     scheduler calls it.
//
// It reports the mean of a cycle (ns/op), its p50 and p99 (cycle-p50-ms,
// cycle-p99-ms), and, in handler mode, those of the time spent in the
// extender's handler (extender-p50-ms, extender-p99-ms): the cycle less the
// scheduler's own JSON encoding and decoding.
// Run: go test -run '^$' -bench FilterPrioritize5000Nodes -benchtime 400x ./pkg/extender/
func BenchmarkFilterPrioritize5000Nodes(b *testing.B) {
	const clusterNodes = 5000
	for _, name := range []string{string(gpu.PolicyFragFit), string(gpu.PolicyBestFit)} {
		for _, sent := range []int{defaultNodesToFind(clusterNodes), clusterNodes} {
			b.Run(fmt.Sprintf("policy=%s/nodes-sent=%d", name, sent), func(b *testing.B) {
				opts := NewOptions()
				opts.Policy = name
				policy, err := opts.NewPolicy()
				if err != nil {
					b.Fatal(err)
				}
				benchFilterPrioritize(b, policy, clusterNodes, sent)
			})
		}
	}
}

// defaultNodesToFind is how many feasible nodes kube-scheduler looks for,
// and so sends its extenders, when percentageOfNodesToScore is left at its
// adaptive default: 50 − nodes/125 percent, at least 5%, at least 100 nodes.
func defaultNodesToFind(nodes int) int {
	if nodes < 100 {
		return nodes
	}
	pct := max(50-nodes/125, 5)
	return max(nodes*pct/100, 100)
}

func benchFilterPrioritize(b *testing.B, policy *gpu.Policy, clusterNodes, sent int) {
	c, nodes, all := benchCluster(b, clusterNodes)
	names := all[:sent]
	nodes = nodes[:sent]
	h := NewHandler(New(c, nil, policy), DefaultMaxRequestBytes, nil)
	pod := gt.MakeGPUPod("share").Milli(250).GPUMemory("8Gi").Obj()

	var served time.Duration // in the extender's handler, this cycle
	inProcess := func(verb string, body []byte) []byte {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/"+verb, bytes.NewReader(body))
		start := time.Now()
		h.ServeHTTP(rec, req)
		served += time.Since(start)
		if rec.Code != http.StatusOK {
			b.Fatalf("%s: HTTP %d: %s", verb, rec.Code, rec.Body)
		}
		return rec.Body.Bytes()
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	overHTTP := func(verb string, body []byte) []byte {
		resp, err := client.Post(srv.URL+"/"+verb, "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		out, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			b.Fatalf("%s: HTTP %d: %v %s", verb, resp.StatusCode, err, out)
		}
		return out
	}

	// extender-only: the requests are encoded once and the answers
	// discarded, so the time and the garbage are the extender's alone, as
	// they are when the scheduler runs in another process.
	b.Run("extender-only", func(b *testing.B) {
		filterBody, _ := json.Marshal(&extenderv1.ExtenderArgs{Pod: pod, NodeNames: &names})
		prioritizeBody := filterBody // every node is feasible
		serve := func(verb string, body []byte) {
			w := discard{header: http.Header{}}
			h.ServeHTTP(&w, httptest.NewRequest(http.MethodPost, "/"+verb, bytes.NewReader(body)))
			if w.code != 0 && w.code != http.StatusOK {
				b.Fatalf("%s: HTTP %d", verb, w.code)
			}
		}
		var took []time.Duration
		i := 0
		for b.Loop() {
			i++
			c.onNode(nodes[i%len(nodes)].DeepCopy())
			start := time.Now()
			serve(VerbFilter, filterBody)
			serve(VerbPrioritize, prioritizeBody)
			took = append(took, time.Since(start))
		}
		slices.Sort(took)
		b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "extender-p50-ms")
		b.ReportMetric(float64(took[(len(took)*99)/100].Microseconds())/1000, "extender-p99-ms")
	})

	for _, mode := range []struct {
		name string
		send func(verb string, body []byte) []byte
	}{{"handler", inProcess}, {"loopback", overHTTP}} {
		b.Run(mode.name, func(b *testing.B) {
			cycle := func(i int) {
				// The previous pod's bind changed one node.
				n := nodes[i%len(nodes)].DeepCopy()
				c.onNode(n)

				body, _ := json.Marshal(&extenderv1.ExtenderArgs{Pod: pod, NodeNames: &names})
				var filtered extenderv1.ExtenderFilterResult
				if err := json.Unmarshal(mode.send(VerbFilter, body), &filtered); err != nil {
					b.Fatal(err)
				}
				if len(*filtered.NodeNames) != len(names) {
					b.Fatalf("%d nodes feasible, want all", len(*filtered.NodeNames))
				}
				body, _ = json.Marshal(&extenderv1.ExtenderArgs{Pod: pod, NodeNames: filtered.NodeNames})
				var scores extenderv1.HostPriorityList
				if err := json.Unmarshal(mode.send(VerbPrioritize, body), &scores); err != nil {
					b.Fatal(err)
				}
				if len(scores) != len(names) {
					b.Fatalf("%d scores", len(scores))
				}
			}
			cycle(0) // every view computed once, as in steady state
			var took, inExtender []time.Duration
			i := 0
			for b.Loop() {
				i++
				served = 0
				start := time.Now()
				cycle(i)
				took = append(took, time.Since(start))
				inExtender = append(inExtender, served)
			}
			report := func(d []time.Duration, unit string) {
				slices.Sort(d)
				b.ReportMetric(float64(d[len(d)/2].Microseconds())/1000, unit+"-p50-ms")
				b.ReportMetric(float64(d[(len(d)*99)/100].Microseconds())/1000, unit+"-p99-ms")
			}
			report(took, "cycle")
			if mode.name == "handler" {
				report(inExtender, "extender")
			}
		})
	}
}

// discard is a ResponseWriter that keeps only the status code.
type discard struct {
	header http.Header
	code   int
}

func (d *discard) Header() http.Header         { return d.header }
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }
func (d *discard) WriteHeader(code int)        { d.code = code }
