package extender

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

// TestMutualTLS serves the extender with --client-ca-file over real TLS on
// loopback and calls it the ways a tenant's pod could: without a
// certificate, with one from a CA of its own, with the scheduler's
// certificate but a name the extender does not allow, with the extender's
// own serving certificate (signed by the right CA, for server
// authentication only), over HTTP/1.1 and HTTP/2. Only the scheduler's
// certificate reaches filter and bind; health and readiness stay open for
// the kubelet's probes.
func TestMutualTLS(t *testing.T) {
	dir := writeCertificates(t, "kube-scheduler")
	forged := writeCertificates(t, "kube-scheduler") // the same names, another CA
	node := gt.MakeGPUNode("a100-0").GFD(a100, 1, 81920).Obj()
	pod := gt.MakeGPUPod("p").GPUs(1).Obj()
	pod.Spec.SchedulerName = ""

	for _, tc := range []struct {
		name        string
		clientNames []string
		clientDir   string // the client certificate's set; "" for none
		serverPair  bool   // present the set's serving pair instead of its client pair
		http2       bool
		wantFilter  int // HTTP status of /filter; 0: the handshake fails
	}{
		{"no client certificate", nil, "", false, false, http.StatusUnauthorized},
		{"no client certificate, HTTP/2", nil, "", false, true, http.StatusUnauthorized},
		{"the scheduler's certificate", nil, dir, false, false, http.StatusOK},
		{"the scheduler's certificate, HTTP/2", nil, dir, false, true, http.StatusOK},
		{"a certificate of another CA", nil, forged, false, false, 0},
		{"the serving certificate as a client's", nil, dir, true, false, 0},
		{"the scheduler's certificate, its name allowed", []string{"kube-scheduler"}, dir, false, false, http.StatusOK},
		{"the scheduler's certificate, another name required", []string{"gpusched-scheduler"}, dir, false, false, http.StatusForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			opts := NewOptions()
			opts.BindAddress = "127.0.0.1:0"
			opts.TLSCertFile, opts.TLSPrivateKeyFile = filepath.Join(dir, ServerCert), filepath.Join(dir, ServerKey)
			opts.ClientCAFile, opts.ClientNames = filepath.Join(dir, CAFile), tc.clientNames
			client := fake.NewClientset(node, pod)
			client.PrependReactor("create", "pods", bindReactor(client.Tracker()))
			s := startSynced(ctx, t, opts, client)
			config := clientTLSConfig(t, dir, tc.clientDir)
			if tc.serverPair {
				pair, err := tls.LoadX509KeyPair(filepath.Join(dir, ServerCert), filepath.Join(dir, ServerKey))
				if err != nil {
					t.Fatal(err)
				}
				config.Certificates = []tls.Certificate{pair}
			}
			httpClient := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: config, ForceAttemptHTTP2: tc.http2}}
			base := "https://" + s.Addr().String()

			if code, body := postTo(t, httpClient, base+"/"+VerbFilter, `{"Pod":{"metadata":{"name":"p","namespace":"default"}},"NodeNames":["a100-0"]}`); code != tc.wantFilter {
				t.Errorf("filter: %d %q, want %d", code, body, tc.wantFilter)
			}
			bind := `{"PodName":"p","PodNamespace":"default","PodUID":"` + string(pod.UID) + `","Node":"a100-0"}`
			code, body := postTo(t, httpClient, base+"/"+VerbBind, bind)
			if code != tc.wantFilter {
				t.Errorf("bind: %d %q, want %d", code, body, tc.wantFilter)
			}
			bound := code == http.StatusOK && strings.Contains(body, `"Error":""`)
			if bound != (tc.wantFilter == http.StatusOK) {
				t.Errorf("bind answered %q: bound %v", body, bound)
			}
			if tc.wantFilter == 0 {
				return
			}
			resp, err := httpClient.Get(base + "/healthz")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if want := map[bool]int{false: 1, true: 2}[tc.http2]; resp.ProtoMajor != want {
				t.Errorf("spoke HTTP/%d, want HTTP/%d", resp.ProtoMajor, want)
			}
			for _, path := range []string{"/healthz", "/readyz"} {
				resp, err := tlsClient(t, dir, "").Get(base + path)
				if err != nil {
					t.Fatalf("%s without a client certificate: %v", path, err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Errorf("%s without a client certificate: %d", path, resp.StatusCode)
				}
			}
		})
	}
}

// tlsClient is an HTTP client with clientTLSConfig.
func tlsClient(t *testing.T, dir, clientDir string) *http.Client {
	t.Helper()
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: clientTLSConfig(t, dir, clientDir)}}
}

// clientTLSConfig trusts the server of the certificate set in dir and
// presents the client certificate of the set in clientDir ("": none).
func clientTLSConfig(tb testing.TB, dir, clientDir string) *tls.Config {
	tb.Helper()
	pool := x509.NewCertPool()
	ca, err := os.ReadFile(filepath.Join(dir, CAFile))
	if err != nil || !pool.AppendCertsFromPEM(ca) {
		tb.Fatalf("reading the CA: %v", err)
	}
	config := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if clientDir != "" {
		cert, err := tls.LoadX509KeyPair(filepath.Join(clientDir, ClientCert), filepath.Join(clientDir, ClientKey))
		if err != nil {
			tb.Fatal(err)
		}
		config.Certificates = []tls.Certificate{cert}
	}
	return config
}

// postTo returns the status and body of a POST; status 0 when the request
// failed (a refused handshake).
func postTo(t *testing.T, c *http.Client, url, body string) (int, string) {
	t.Helper()
	resp, err := c.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

// TestCertificateReload: a rotated certificate set is served from the next
// reload on, and a broken file on a reload keeps the last good one.
func TestCertificateReload(t *testing.T) {
	dir := writeCertificates(t, DefaultClient)
	f := &tlsFiles{certFile: filepath.Join(dir, ServerCert), keyFile: filepath.Join(dir, ServerKey), caFile: filepath.Join(dir, CAFile)}
	start := time.Now()
	first, err := f.current(start)
	if err != nil {
		t.Fatal(err)
	}
	if first.ClientAuth != tls.VerifyClientCertIfGiven || first.ClientCAs == nil {
		t.Errorf("client certificates: %v, CAs %v; want them verified when given", first.ClientAuth, first.ClientCAs)
	}
	if err := WriteCertificates(dir, CertificateRequest{ServerNames: []string{"127.0.0.1"}, ClientName: DefaultClient, ValidFor: time.Hour}); err != nil {
		t.Fatal(err)
	}
	leaf := func(c *tls.Config) []byte { return c.Certificates[0].Certificate[0] }
	if got, _ := f.current(start.Add(certReloadInterval / 2)); !bytes.Equal(leaf(got), leaf(first)) {
		t.Error("the files were read again before the reload interval")
	}
	second, _ := f.current(start.Add(certReloadInterval))
	if bytes.Equal(leaf(second), leaf(first)) {
		t.Error("the rotated certificate is not served after the reload interval")
	}
	if err := os.WriteFile(filepath.Join(dir, CAFile), []byte("not PEM"), 0o600); err != nil {
		t.Fatal(err)
	}
	third, err := f.current(start.Add(3 * certReloadInterval))
	if err != nil || !bytes.Equal(leaf(third), leaf(second)) {
		t.Errorf("a broken CA file on reload: %v; want the last good configuration kept", err)
	}
	broken := &tlsFiles{certFile: f.certFile, keyFile: f.keyFile, caFile: f.caFile}
	if _, err := broken.current(start); err == nil || !strings.Contains(err.Error(), "--client-ca-file") {
		t.Errorf("a broken CA file at start: %v; want an error naming --client-ca-file", err)
	}
}

func TestWriteCertificatesRefuses(t *testing.T) {
	for name, req := range map[string]CertificateRequest{
		"no server name": {ClientName: "c", ValidFor: time.Hour},
		"no client name": {ServerNames: []string{"s"}, ValidFor: time.Hour},
		"no validity":    {ServerNames: []string{"s"}, ClientName: "c"},
	} {
		if err := WriteCertificates(t.TempDir(), req); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8888": true, "127.3.2.1:1": true, "[::1]:8888": true, "localhost:8888": true,
		"0.0.0.0:8888": false, ":8888": false, "[::]:8888": false, "192.0.2.1:8888": false, "example.com:8888": false, "127.0.0.1": false,
	} {
		if got := IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}
