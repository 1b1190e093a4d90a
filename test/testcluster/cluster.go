// Package testcluster gives end-to-end tests a real, in-process Kubernetes
// control plane (embedded etcd plus kube-apiserver) and an in-process
// kube-scheduler that is built and run exactly like the production binary
// (k8s.io/kubernetes/cmd/kube-scheduler/app).
//
// Nothing but the API server and the scheduler run: there is no kubelet, no
// controller-manager and no service-account controller. Nodes are plain API
// objects created with [CreateNode]; pods are never started, a pod counts as
// scheduled once spec.nodeName is set.
//
// All listeners bind to 127.0.0.1 only. Everything a helper starts is stopped
// through t.Cleanup, in reverse start order (schedulers, then the API server,
// then etcd), so tests normally need no explicit teardown.
//
// Logging: by default klog is reduced to errors so that `go test -v` output
// stays readable. Set TESTCLUSTER_VERBOSE=1 to keep klog's settings untouched
// and to route the API server's contextual log output to t.Log.
package testcluster

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/klog/v2"
	kubeapiservertesting "k8s.io/kubernetes/cmd/kube-apiserver/app/testing"
	"k8s.io/kubernetes/test/utils/ktesting"
	"k8s.io/kubernetes/test/utils/ktesting/initoption"
)

// VerboseEnv is the environment variable that, when non-empty, disables the
// log quieting this package applies by default.
const VerboseEnv = "TESTCLUSTER_VERBOSE"

// DefaultAPIServerFlags are always passed to the kube-apiserver, before any
// caller-supplied flags (a later occurrence of a flag overrides an earlier
// one).
//
//   - ServiceAccount admission is disabled because no service-account
//     controller creates the "default" ServiceAccount, so every pod create
//     would be rejected.
//   - TaintNodesByCondition admission is disabled because it adds the
//     node.kubernetes.io/not-ready:NoSchedule taint on node creation and only
//     the (absent) node lifecycle controller would remove it.
var DefaultAPIServerFlags = []string{
	"--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
	"--endpoint-reconciler-type=none",
}

// etcdStartTimeout bounds how long Start waits for embedded etcd to become
// ready.
const etcdStartTimeout = time.Minute

// Cluster is a running control plane. All fields are set by Start and must be
// treated as read-only.
type Cluster struct {
	// Client is an admin (system:masters) clientset for the API server.
	Client kubernetes.Interface
	// RestConfig is the admin client configuration Client was built from.
	// Callers that modify it must copy it first (rest.CopyConfig).
	RestConfig *rest.Config
	// KubeconfigPath is a kubeconfig file (inside t.TempDir()) holding the
	// same admin credentials as RestConfig. It is what StartScheduler points
	// the kube-scheduler at.
	KubeconfigPath string
	// EtcdEndpoint is the client URL of the embedded etcd
	// (http://127.0.0.1:<port>).
	EtcdEndpoint string

	t        *testing.T
	schedSeq int // number of schedulers started; names their config files
}

// Start brings up an embedded etcd and a kube-apiserver backed by it and
// returns once the API server reports healthy and the "default" namespace
// exists. Any failure aborts the test with t.Fatal.
//
// apiserverFlags are extra kube-apiserver command line flags (for example
// "--feature-gates=..." or "--runtime-config=..."); they are applied after
// DefaultAPIServerFlags.
//
// Teardown is registered with t.Cleanup: the API server is stopped first,
// then etcd, then the data directory is removed. Start must be called from
// the test goroutine.
func Start(t *testing.T, apiserverFlags ...string) *Cluster {
	t.Helper()
	quietLogging()

	etcdURL, err := startEtcd(t)
	if err != nil {
		t.Fatalf("testcluster: starting etcd: %v", err)
	}

	storage := storagebackend.NewDefaultConfig("/registry", nil)
	storage.Transport.ServerList = []string{etcdURL}

	flags := append(append([]string{}, DefaultAPIServerFlags...), apiserverFlags...)
	instance := kubeapiservertesting.NewDefaultTestServerOptions()
	// The metrics invariant checks done at teardown are about the API
	// server itself, not about what our tests exercise.
	instance.DisableInvariantChecks = true

	// StartTestServer accepts a ktesting.TContext; initializing it ourselves
	// lets us decide whether the server's contextual logs go to t.Log.
	tCtx := ktesting.Init(t, initoption.PerTestOutput(verbose()))
	server, err := kubeapiservertesting.StartTestServer(tCtx, instance, flags, storage)
	if err != nil {
		t.Fatalf("testcluster: starting kube-apiserver: %v", err)
	}
	// Registered after etcd's cleanup, so it runs before it.
	t.Cleanup(server.TearDownFn)

	cfg := rest.CopyConfig(server.ClientConfig)
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("testcluster: creating client: %v", err)
	}

	c := &Cluster{
		Client:       client,
		RestConfig:   cfg,
		EtcdEndpoint: etcdURL,
		t:            t,
	}
	c.KubeconfigPath = filepath.Join(t.TempDir(), "kubeconfig")
	if err := c.WriteKubeconfig(c.KubeconfigPath); err != nil {
		t.Fatalf("testcluster: %v", err)
	}
	return c
}

// WriteKubeconfig writes a kubeconfig file with the cluster's admin
// credentials (server URL, CA, TLS server name and bearer token) to path,
// with mode 0600. It can be called any number of times.
func (c *Cluster) WriteKubeconfig(path string) error {
	rc := c.RestConfig
	const name = "testcluster"
	kc := clientcmdapi.NewConfig()
	kc.Clusters[name] = &clientcmdapi.Cluster{
		Server:                   rc.Host,
		CertificateAuthority:     rc.CAFile,
		CertificateAuthorityData: rc.CAData,
		TLSServerName:            rc.ServerName,
		InsecureSkipTLSVerify:    rc.Insecure,
	}
	kc.AuthInfos[name] = &clientcmdapi.AuthInfo{
		Token:                 rc.BearerToken,
		TokenFile:             rc.BearerTokenFile,
		ClientCertificate:     rc.CertFile,
		ClientCertificateData: rc.CertData,
		ClientKey:             rc.KeyFile,
		ClientKeyData:         rc.KeyData,
	}
	kc.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	kc.CurrentContext = name
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return fmt.Errorf("writing kubeconfig %s: %w", path, err)
	}
	return nil
}

// startEtcd starts a single-member embedded etcd whose data lives in
// t.TempDir() and registers its shutdown with t.Cleanup. It returns the
// client URL.
//
// Ports are chosen by briefly listening on 127.0.0.1:0; because another
// process could grab a port between that probe and etcd binding it, a bind
// failure is retried with fresh ports a few times.
func startEtcd(t *testing.T) (string, error) {
	dataRoot := t.TempDir()
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		e, clientURL, err := tryStartEtcd(filepath.Join(dataRoot, "etcd-"+strconv.Itoa(attempt)))
		if err == nil {
			// Close blocks until the server and its listeners are down.
			t.Cleanup(e.Close)
			return clientURL, nil
		}
		lastErr = err
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	return "", lastErr
}

func tryStartEtcd(dir string) (*embed.Etcd, string, error) {
	ports, err := freeLoopbackPorts(2)
	if err != nil {
		return nil, "", err
	}
	clientURL := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))}
	peerURL := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1]))}

	cfg := embed.NewConfig()
	cfg.Name = "testcluster"
	cfg.Dir = dir
	cfg.ListenClientUrls = []url.URL{clientURL}
	cfg.AdvertiseClientUrls = []url.URL{clientURL}
	cfg.ListenPeerUrls = []url.URL{peerURL}
	cfg.AdvertisePeerUrls = []url.URL{peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = "error"
	if !verbose() {
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	}
	// The data is thrown away after the test; durability only costs time.
	cfg.UnsafeNoFsync = true

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, "", fmt.Errorf("embed.StartEtcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
		return e, clientURL.String(), nil
	case err := <-e.Err():
		e.Close()
		return nil, "", fmt.Errorf("etcd failed while starting: %w", err)
	case <-time.After(etcdStartTimeout):
		e.Server.Stop()
		e.Close()
		return nil, "", errors.New("etcd did not become ready in time")
	}
}

// freeLoopbackPorts returns n distinct TCP ports on 127.0.0.1 that were free
// a moment ago. All probe listeners are held open until every port has been
// picked so the kernel cannot hand out the same port twice.
func freeLoopbackPorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("probing for a free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func verbose() bool { return os.Getenv(VerboseEnv) != "" }

var quietOnce sync.Once

// quietLogging restricts klog's stderr output to errors, unless VerboseEnv is
// set. It changes process-global klog state, once.
func quietLogging() {
	quietOnce.Do(func() {
		if verbose() {
			return
		}
		fs := flag.NewFlagSet("testcluster-klog", flag.ContinueOnError)
		klog.InitFlags(fs)
		for name, value := range map[string]string{
			"logtostderr":                      "true",
			"legacy_stderr_threshold_behavior": "false",
			"stderrthreshold":                  "ERROR",
		} {
			if err := fs.Set(name, value); err != nil {
				// Only possible if klog renamed a flag; logging stays
				// noisy but functional.
				fmt.Fprintf(os.Stderr, "testcluster: klog flag %s: %v\n", name, err)
			}
		}
	})
}
