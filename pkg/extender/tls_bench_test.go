package extender

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"testing"
	"time"

	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

// BenchmarkTransport5000Nodes is what mutual TLS costs the scheduler's
// calls: one filter + prioritize cycle at 5000 GPU nodes, with the 500
// names kube-scheduler sends by default, with FragFit (whose cycle is short,
// so the transport's share shows most) and PairFit (the default), served by
// one extender on 127.0.0.1 three ways:
//
//   - http: plain HTTP (the sidecar on loopback);
//   - tls: HTTPS, no client certificate;
//   - mtls: HTTPS with the scheduler's client certificate verified and its
//     name checked for every request (the default install).
//
// Each is timed with a keep-alive client, as the scheduler's extender client
// reuses its connections, and with a new connection per cycle (+handshake,
// the worst case: every cycle pays a full TLS handshake). The modes take
// turns within each iteration, so that the machine's noise falls on all of
// them alike; it reports each mode's median cycle, and the medians of the
// per-iteration ratio to http and of the time added to http's.
// Run: go test -run '^$' -bench Transport5000Nodes -benchtime 300x -count 5 ./pkg/extender/
func BenchmarkTransport5000Nodes(b *testing.B) {
	for _, policy := range []gpu.PolicyType{gpu.PolicyFragFit, gpu.PolicyPairFit} {
		b.Run("policy="+string(policy), func(b *testing.B) { benchTransport(b, policy) })
	}
}

func benchTransport(b *testing.B, policyType gpu.PolicyType) {
	const clusterNodes = 5000
	dir := filepath.Join(b.TempDir(), "certs")
	err := WriteCertificates(dir, CertificateRequest{ServerNames: []string{"127.0.0.1"}, ClientName: DefaultClient, ValidFor: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	popts := NewOptions()
	popts.Policy = string(policyType)
	policy, err := popts.NewPolicy()
	if err != nil {
		b.Fatal(err)
	}
	c, nodes, all := benchCluster(b, clusterNodes)
	names := all[:defaultNodesToFind(clusterNodes)]
	ext := New(c, nil, policy)
	pod := gt.MakeGPUPod("share").Milli(250).GPUMemory("8Gi").Obj()

	serve := func(h http.Handler, config *tls.Config) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		srv := &http.Server{Handler: h, TLSConfig: config, ReadHeaderTimeout: 5 * time.Second}
		scheme := "http"
		if config != nil {
			scheme = "https"
			go func() { _ = srv.ServeTLS(ln, "", "") }()
		} else {
			go func() { _ = srv.Serve(ln) }()
		}
		b.Cleanup(func() { _ = srv.Close() })
		return scheme + "://" + ln.Addr().String()
	}
	opts := NewOptions()
	opts.TLSCertFile, opts.TLSPrivateKeyFile = filepath.Join(dir, ServerCert), filepath.Join(dir, ServerKey)
	serverOnly, err := serverTLS(opts)
	if err != nil {
		b.Fatal(err)
	}
	opts.ClientCAFile = filepath.Join(dir, CAFile)
	mutual, err := serverTLS(opts)
	if err != nil {
		b.Fatal(err)
	}
	type mode struct {
		name string
		url  string
		tls  *tls.Config // the client's
	}
	trusting := clientTLSConfig(b, dir, "")
	modes := []mode{
		{"http", serve(NewHandler(ext, DefaultMaxRequestBytes, nil), nil), nil},
		{"tls", serve(NewHandler(ext, DefaultMaxRequestBytes, nil), serverOnly), trusting},
		{"mtls", serve(NewHandler(ext, DefaultMaxRequestBytes, &ClientAuth{Names: []string{DefaultClient}}), mutual), clientTLSConfig(b, dir, dir)},
	}

	for _, handshake := range []bool{false, true} {
		label := "keep-alive"
		if handshake {
			label = "new-connection"
		}
		b.Run(label, func(b *testing.B) {
			clients := make([]*http.Client, len(modes))
			for i, m := range modes {
				clients[i] = &http.Client{Transport: &http.Transport{TLSClientConfig: m.tls, DisableKeepAlives: handshake, ForceAttemptHTTP2: false}}
			}
			post := func(i int, verb string, body []byte) []byte {
				resp, err := clients[i].Post(modes[i].url+"/"+verb, "application/json", bytes.NewReader(body))
				if err != nil {
					b.Fatal(err)
				}
				defer resp.Body.Close()
				out, err := io.ReadAll(resp.Body)
				if err != nil || resp.StatusCode != http.StatusOK {
					b.Fatalf("%s %s: HTTP %d: %v %s", modes[i].name, verb, resp.StatusCode, err, out)
				}
				return out
			}
			cycle := func(i, n int) time.Duration {
				c.onNode(nodes[n%len(nodes)].DeepCopy()) // the previous pod's bind changed one node
				start := time.Now()
				body, _ := json.Marshal(&extenderv1.ExtenderArgs{Pod: pod, NodeNames: &names})
				var filtered extenderv1.ExtenderFilterResult
				if err := json.Unmarshal(post(i, VerbFilter, body), &filtered); err != nil || len(*filtered.NodeNames) != len(names) {
					b.Fatalf("%s filter: %v", modes[i].name, err)
				}
				body, _ = json.Marshal(&extenderv1.ExtenderArgs{Pod: pod, NodeNames: filtered.NodeNames})
				var scores extenderv1.HostPriorityList
				if err := json.Unmarshal(post(i, VerbPrioritize, body), &scores); err != nil || len(scores) != len(names) {
					b.Fatalf("%s prioritize: %v", modes[i].name, err)
				}
				return time.Since(start)
			}
			for i := range modes {
				cycle(i, 0) // every view computed, connections open
			}
			took := make([][]time.Duration, len(modes))
			ratios := make([][]float64, len(modes))
			added := make([][]time.Duration, len(modes))
			n := 0
			for b.Loop() {
				n++
				this := make([]time.Duration, len(modes))
				for k := range modes {
					i := (n + k) % len(modes) // each mode takes each turn
					this[i] = cycle(i, n)
				}
				for i := range modes {
					took[i] = append(took[i], this[i])
					ratios[i] = append(ratios[i], float64(this[i])/float64(this[0]))
					added[i] = append(added[i], this[i]-this[0])
				}
			}
			for i, m := range modes {
				slices.Sort(took[i])
				slices.Sort(ratios[i])
				slices.Sort(added[i])
				b.ReportMetric(float64(took[i][len(took[i])/2].Microseconds())/1000, m.name+"-p50-ms")
				if i > 0 {
					b.ReportMetric(ratios[i][len(ratios[i])/2], m.name+"/http")
					b.ReportMetric(float64(added[i][len(added[i])/2].Microseconds())/1000, m.name+"-added-ms")
				}
			}
		})
	}
}
