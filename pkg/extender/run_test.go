package extender

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		set   func(o *Options)
		wants []string // parts of the error; none: valid
	}{
		{"defaults", func(*Options) {}, nil},
		{"memory only", func(o *Options) { o.GPUWeight, o.MemoryWeight = 0, 3 }, nil},
		{"Packing", func(o *Options) { o.Policy = "Packing" }, nil},
		{"FGD", func(o *Options) { o.Policy = "FGD" }, nil},
		{"an unknown policy", func(o *Options) { o.Policy = "bestfit" }, []string{`invalid --policy "bestfit": ` + unknownPolicy(t, "bestfit")}},
		{"a negative weight", func(o *Options) { o.MemoryWeight = -1 }, []string{"invalid --memory-weight -1: want a weight from 0 to 100"}},
		{"a weight over 100", func(o *Options) { o.GPUWeight = 101 }, []string{"invalid --gpu-weight 101: want a weight from 0 to 100"}},
		{"no scheduler to bind for", func(o *Options) { o.SchedulerNames = nil }, []string{`invalid --scheduler-name []: want the names of the schedulers that call the extender`}},
		{"an unknown gang mode", func(o *Options) { o.PodGroups = "queue" }, []string{`invalid --pod-groups "queue": want "refuse" or "place"`}},
		{"an empty scheduler name", func(o *Options) { o.SchedulerNames = []string{"default-scheduler", ""} }, []string{`invalid --scheduler-name ["default-scheduler" ""]`}},
		{"no positive weight", func(o *Options) { o.GPUWeight = 0 }, []string{"invalid --gpu-weight and --memory-weight: at least one must be positive"}},
		{"a certificate without key", func(o *Options) { o.TLSCertFile = "c.pem" }, []string{"--tls-cert-file and --tls-private-key-file: set both or neither"}},
		{"no port", func(o *Options) { o.BindAddress = "127.0.0.1" }, []string{`invalid --bind-address "127.0.0.1": want host:port`}},
		{"loopback without client certificates", func(o *Options) { o.BindAddress = "[::1]:8888" }, nil},
		{"every address without client certificates", func(o *Options) { o.BindAddress = "0.0.0.0:8888" }, []string{
			`invalid --bind-address "0.0.0.0:8888": the API binds pods and gives them GPUs: listen on loopback (a sidecar of the scheduler) or require the scheduler's client certificate with --client-ca-file`,
		}},
		{"an empty host without client certificates", func(o *Options) { o.BindAddress = ":8888" }, []string{`invalid --bind-address ":8888"`}},
		{"every address with client certificates", func(o *Options) {
			o.BindAddress, o.TLSCertFile, o.TLSPrivateKeyFile, o.ClientCAFile, o.ClientNames = ":8888", "tls.crt", "tls.key", "ca.crt", []string{"kube-scheduler"}
		}, nil},
		{"a client CA without TLS", func(o *Options) { o.ClientCAFile = "ca.crt" }, []string{"invalid --client-ca-file: client certificates need TLS"}},
		{"client names without a client CA", func(o *Options) { o.ClientNames = []string{"kube-scheduler"} }, []string{`invalid --client-name ["kube-scheduler"]: names are checked in client certificates: set --client-ca-file too`}},
		{"a negative settle time", func(o *Options) { o.BindSettleAfter = -time.Second }, []string{"invalid --bind-settle-after -1s: want a positive duration"}},
		{"no body", func(o *Options) { o.MaxRequestBytes = 0 }, []string{"invalid --max-request-bytes 0"}},
		{"no timeout", func(o *Options) { o.WriteTimeout = 0 }, []string{"invalid --write-timeout 0s: want a positive duration"}},
		{"leader election", func(o *Options) { o.LeaderElect = true }, nil},
		{"a renew deadline past the lease", func(o *Options) { o.LeaderElect, o.RenewDeadline = true, time.Minute }, []string{
			"invalid --leader-elect-lease-duration 15s, --leader-elect-renew-deadline 1m0s, --leader-elect-retry-period 2s: want lease duration (in whole seconds) > renew deadline > retry period > 0",
		}},
		// The Lease says 1 s: another instance may lead 1 s after a renewal, before the fence.
		{"a renew deadline past the lease's whole seconds", func(o *Options) {
			o.LeaderElect, o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = true, 1900*time.Millisecond, 1500*time.Millisecond, 500*time.Millisecond
		}, []string{"want lease duration (in whole seconds) > renew deadline"}},
		{"every error at once", func(o *Options) { o.Policy, o.GPUWeight, o.ReadTimeout = "x", -5, -time.Second }, []string{
			"--policy", "--gpu-weight -5", "at least one must be positive", "--read-timeout -1s",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := NewOptions()
			tc.set(o)
			err := o.Validate()
			if len(tc.wants) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				if _, err := o.NewPolicy(); err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatalf("valid, want %q", tc.wants)
			}
			for _, want := range tc.wants {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q lacks %q", err, want)
				}
			}
		})
	}
}

// TestStartStop runs a server on loopback, over plain HTTP and over TLS: it
// becomes ready once the informers sync, answers, and stops.
func TestStartStop(t *testing.T) {
	for _, useTLS := range []bool{false, true} {
		t.Run(map[bool]string{false: "http", true: "https"}[useTLS], func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			opts := NewOptions()
			opts.BindAddress = "127.0.0.1:0"
			client := &http.Client{Timeout: 5 * time.Second}
			scheme := "http"
			if useTLS {
				opts.TLSCertFile, opts.TLSPrivateKeyFile = writeSelfSigned(t)
				client.Transport = &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // a throwaway test certificate
				scheme = "https"
			}
			s := startSynced(ctx, t, opts, fake.NewClientset())
			resp, err := client.Get(scheme + "://" + s.Addr().String() + "/readyz")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != "ok" {
				t.Errorf("readyz: %d %q", resp.StatusCode, body)
			}
			if err := s.Stop(); err != nil {
				t.Errorf("Stop: %v", err)
			}
			select {
			case <-s.Done():
			default:
				t.Error("Done not closed after Stop")
			}
			if _, err := client.Get(scheme + "://" + s.Addr().String() + "/healthz"); err == nil {
				t.Error("a stopped server still answers")
			}
		})
	}
}

// TestLeaderElection: of two instances on one lease only the leader binds;
// when it stops, it hands the lease over and the other binds.
func TestLeaderElection(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	node := gt.MakeGPUNode("a100-0").GFD(a100, 2, 81920).Obj()
	p0, p1 := gt.MakeGPUPod("p0").GPUs(1).Obj(), gt.MakeGPUPod("p1").GPUs(1).Obj()
	client := fake.NewClientset(node, p0, p1)
	client.PrependReactor("create", "pods", bindReactor(client.Tracker()))
	start := func() *Server {
		opts := NewOptions()
		opts.BindAddress = "127.0.0.1:0"
		opts.LeaderElect = true
		opts.LeaseDuration, opts.RenewDeadline, opts.RetryPeriod = 3*time.Second, 2*time.Second, 100*time.Millisecond
		s := startSynced(ctx, t, opts, client)
		return s
	}
	first := start()
	eventually(t, "the first instance to lead", first.ext.mayBind)
	second := start()
	if r := second.ext.Bind(ctx, bindArgs(p0, "a100-0")); !strings.Contains(r.Error, "does not hold the leader lease") {
		t.Fatalf("bind on the instance that does not lead: %q", r.Error)
	}
	if r := first.ext.Bind(ctx, bindArgs(p0, "a100-0")); r.Error != "" {
		t.Fatalf("bind on the leader: %s", r.Error)
	}
	if err := first.Stop(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the second instance to lead", second.ext.mayBind)
	if r := second.ext.Bind(ctx, bindArgs(p1, "a100-0")); r.Error != "" {
		t.Fatalf("bind on the new leader: %s", r.Error)
	}
	got, err := client.CoreV1().Pods("default").Get(ctx, "p1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The new leader saw p0 on GPU 0.
	if a, ok := gpu.AssignmentOf(got); !ok || a.Devices[0] != 1 {
		t.Errorf("p1: %s, want GPU 1", got.Annotations[gpu.AnnotationAssigned])
	}
}

func TestStartFails(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for name, set := range map[string]func(o *Options){
		"invalid options":  func(o *Options) { o.Policy = "x" },
		"port in use":      func(o *Options) { o.BindAddress = busy.Addr().String() },
		"missing TLS file": func(o *Options) { o.TLSCertFile, o.TLSPrivateKeyFile = "/nonexistent/c.pem", "/nonexistent/k.pem" },
	} {
		t.Run(name, func(t *testing.T) {
			opts := NewOptions()
			opts.BindAddress = "127.0.0.1:0"
			set(opts)
			if s, err := Start(ctx, opts, fake.NewClientset()); err == nil {
				s.Stop()
				t.Fatal("Start succeeded")
			}
		})
	}
}

// startSynced starts a server, stopped when the test ends, and waits until
// its informers have synced.
func startSynced(ctx context.Context, t *testing.T, opts *Options, client kubernetes.Interface) *Server {
	t.Helper()
	s, err := Start(ctx, opts, client)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	if err := s.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	return s
}

// writeSelfSigned writes a serving certificate for 127.0.0.1 and its key
// (WriteCertificates' set, whose CA the client does not check here).
func writeSelfSigned(t *testing.T) (certFile, keyFile string) {
	t.Helper()
	dir := writeCertificates(t, DefaultClient)
	return filepath.Join(dir, ServerCert), filepath.Join(dir, ServerKey)
}

// writeCertificates writes a set of WriteCertificates for a server at
// 127.0.0.1 and a client named client, and returns its directory.
func writeCertificates(t *testing.T, client string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "certs")
	if err := WriteCertificates(dir, CertificateRequest{ServerNames: []string{"127.0.0.1", "localhost"}, ClientName: client, ValidFor: time.Hour}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// unknownPolicy is the engine's error for an unknown policy name, which
// every front end reports as it is.
func unknownPolicy(t *testing.T, name string) string {
	t.Helper()
	_, err := gpu.LookupPolicy(name)
	if err == nil {
		t.Fatalf("policy %q is registered", name)
	}
	return err.Error()
}
