package policyservice

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	v1 "k8s.io/api/core/v1"

	"github.com/gpusched/gpusched/pkg/apis/config"
	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/policyservice/policyservicetest"
	pb "github.com/gpusched/gpusched/pkg/policyservice/v1alpha1"
)

// TestExternalPolicyMutualTLS: with tls set, the scheduler verifies the
// service by the CA file and presents its client certificate; a service
// whose certificate the CA did not sign is an error (the fallback
// decides), and a missing file is refused when the Scorer is built.
func TestExternalPolicyMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca, caKey := newCA(t, "policy-ca")
	writePEM(t, filepath.Join(dir, "ca.crt"), "CERTIFICATE", ca.Raw)
	serverCert := issue(t, ca, caKey, "policy-service", true)
	clientCert := issue(t, ca, caKey, "gpusched", false)
	clientCertFile, clientKeyFile := filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key")
	writePEM(t, clientCertFile, "CERTIFICATE", clientCert.Certificate[0])
	keyDER, err := x509.MarshalECPrivateKey(clientCert.PrivateKey.(*ecdsa.PrivateKey))
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, clientKeyFile, "EC PRIVATE KEY", keyDER)

	pool := x509.NewCertPool()
	pool.AddCert(ca)
	addr := serveTLS(t, &tls.Config{Certificates: []tls.Certificate{serverCert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert})
	cfg := config.ExternalPolicy{Endpoint: addr, Timeout: 5 * time.Second, Mode: config.ExternalEnforce,
		CircuitBreaker: config.CircuitBreaker{Failures: 100, OpenFor: time.Second},
		TLS:            &config.ExternalTLS{CAFile: filepath.Join(dir, "ca.crt"), CertFile: clientCertFile, KeyFile: clientKeyFile, ServerName: "127.0.0.1"}}
	nodes := []gpu.NodeFeatures{{Name: "a"}, {Name: "b"}}
	score := func(s *Scorer) ([]float64, *Fallback) {
		return s.ScoreNodes(context.Background(), &v1.Pod{}, &gpu.Demand{Count: 1, Milli: gpu.MilliPerGPU}, nodes, gpu.PolicyFragFit)
	}

	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if scores, fb := score(s); fb != nil || scores[1] != 1 {
		t.Fatalf("mutual TLS: scores %v, fallback %v", scores, fb)
	}

	// Another CA's service: not trusted.
	other, otherKey := newCA(t, "other-ca")
	stranger := serveTLS(t, &tls.Config{Certificates: []tls.Certificate{issue(t, other, otherKey, "stranger", true)}})
	strangerCfg := cfg
	strangerCfg.Endpoint = stranger
	s2, err := New(strangerCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if _, fb := score(s2); fb == nil || fb.Cause != CauseError {
		t.Errorf("an untrusted service: fallback %v, want cause error", fb)
	}

	missing := cfg
	missing.TLS = &config.ExternalTLS{CAFile: filepath.Join(dir, "nope.crt")}
	if _, err := New(missing); err == nil {
		t.Error("a missing CA file was accepted")
	}
}

// serveTLS serves a policy service that prefers node "b" with tc on loopback.
func serveTLS(t *testing.T, tc *tls.Config) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(grpc.Creds(credentials.NewTLS(tc)))
	srv := &policyservicetest.Server{}
	srv.Set(policyservicetest.Prefer("b"))
	pb.RegisterPolicyServiceServer(g, srv)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

func newCA(t *testing.T, name string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// issue signs a certificate for 127.0.0.1 (server) or a client.
func issue(t *testing.T, ca *x509.Certificate, caKey *ecdsa.PrivateKey, name string, server bool) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func writePEM(t *testing.T, path, kind string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
