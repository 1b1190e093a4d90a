package extender

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// Who may call the extender API.
//
// Filter, prioritize, bind and preempt are the scheduler's alone: bind
// gives a pod GPUs with the extender's identity, which the assignment
// admission policy trusts, and filter and prioritize disclose every node's
// GPU allocation. So the extender serves them either on a loopback address
// (a sidecar of the scheduler, in a pod of its own network namespace) or
// with mutual TLS: the caller must present a client certificate signed by
// --client-ca-file and, with --client-name, naming one of the allowed
// names. /healthz, /readyz and /metrics answer without a certificate, for
// the kubelet's probes and Prometheus.

// IsLoopback reports whether a --bind-address host:port listens on loopback
// only (127.0.0.0/8, ::1 or localhost); an empty host is every address.
func IsLoopback(hostPort string) bool {
	host, _, err := net.SplitHostPort(hostPort)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ClientAuth, given to NewHandler, makes the API verbs require a verified
// client certificate; the server's TLS configuration verifies it against
// the client CA.
type ClientAuth struct {
	// Names, when not empty, are the common names or DNS names one of which
	// the certificate must carry.
	Names []string
}

// errNoClientCert and errClientName are the refusals' reasons.
var (
	errNoClientCert = errors.New("client certificate required: this extender serves its API only to a scheduler presenting a certificate signed by its --client-ca-file")
	errClientName   = errors.New("client certificate not allowed")
)

// check returns nil when the request came over TLS with a verified client
// certificate that names an allowed client.
func (a *ClientAuth) check(r *http.Request) error {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.VerifiedChains[0]) == 0 {
		return errNoClientCert
	}
	if len(a.Names) == 0 {
		return nil
	}
	leaf := r.TLS.VerifiedChains[0][0]
	if slices.Contains(a.Names, leaf.Subject.CommonName) || slices.ContainsFunc(leaf.DNSNames, func(n string) bool { return slices.Contains(a.Names, n) }) {
		return nil
	}
	return fmt.Errorf("%w: it names %q (DNS names %q); allowed: %s (--client-name)", errClientName,
		leaf.Subject.CommonName, leaf.DNSNames, strings.Join(a.Names, ", "))
}

// certReloadInterval is how often the serving certificate and the client CA
// are looked at again, so that a rotated Secret (cert-manager, or a new set
// of WriteCertificates) takes effect without a restart.
const certReloadInterval = 10 * time.Second

// tlsFiles serves TLS from the files of Options, read again every
// certReloadInterval.
type tlsFiles struct {
	certFile, keyFile, caFile string

	mu      sync.Mutex
	checked time.Time
	config  *tls.Config
}

// serverTLS returns the server's TLS configuration for opts (nil without
// --tls-cert-file): its serving certificate and, with --client-ca-file,
// client certificates verified against that CA when given (the handler
// requires one for the API verbs). The files are read now, so that a bad
// file fails the start, and again every certReloadInterval on new
// connections.
func serverTLS(opts *Options) (*tls.Config, error) {
	if opts.TLSCertFile == "" {
		return nil, nil
	}
	f := &tlsFiles{certFile: opts.TLSCertFile, keyFile: opts.TLSPrivateKeyFile, caFile: opts.ClientCAFile}
	if _, err := f.current(time.Now()); err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return f.current(time.Now())
		},
	}, nil
}

// current returns the configuration from the files as they were at most
// certReloadInterval ago. A file that cannot be read or parsed on a reload
// keeps the last good configuration (the error is returned on the first
// load only).
func (f *tlsFiles) current(now time.Time) (*tls.Config, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.config != nil && now.Sub(f.checked) < certReloadInterval {
		return f.config, nil
	}
	f.checked = now
	config, err := f.load()
	if err != nil {
		if f.config != nil {
			return f.config, nil
		}
		return nil, err
	}
	f.config = config
	return config, nil
}

func (f *tlsFiles) load() (*tls.Config, error) {
	certPEM, err := os.ReadFile(f.certFile)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert-file: %w", err)
	}
	keyPEM, err := os.ReadFile(f.keyFile)
	if err != nil {
		return nil, fmt.Errorf("--tls-private-key-file: %w", err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert-file %s and --tls-private-key-file %s: %w", f.certFile, f.keyFile, err)
	}
	config := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}}
	if f.caFile != "" {
		caPEM, err := os.ReadFile(f.caFile)
		if err != nil {
			return nil, fmt.Errorf("--client-ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(caPEM) {
			return nil, fmt.Errorf("--client-ca-file %s: no PEM certificate in it", f.caFile)
		}
		config.ClientCAs = pool
		config.ClientAuth = tls.VerifyClientCertIfGiven
	}
	return config, nil
}
