package extender

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// The files WriteCertificates writes: the CA's certificate (the extender's
// --client-ca-file and the scheduler's tlsConfig.caFile), the extender's
// serving pair (--tls-cert-file, --tls-private-key-file) and the
// scheduler's client pair (tlsConfig.certFile and keyFile).
const (
	CAFile        = "ca.crt"
	ServerCert    = "tls.crt"
	ServerKey     = "tls.key"
	ClientCert    = "scheduler.crt"
	ClientKey     = "scheduler.key"
	DefaultClient = "gpusched-extender-client"
)

// CertificateRequest says what WriteCertificates issues.
type CertificateRequest struct {
	// ServerNames are the DNS names and IP addresses the scheduler reaches
	// the extender by (its urlPrefix's host, or tlsConfig.serverName).
	ServerNames []string
	// ClientName is the client certificate's common name, the one the
	// extender's --client-name may require.
	ClientName string
	// ValidFor is how long every certificate is valid from now.
	ValidFor time.Duration
}

// WriteCertificates creates a CA of its own for one extender and its
// scheduler, issues the extender's serving certificate and the scheduler's
// client certificate from it, and writes them into dir (created 0700; keys
// 0600). The CA's private key is not kept: nothing else can be issued from
// it, and rotating means issuing a new set.
func WriteCertificates(dir string, req CertificateRequest) error {
	if len(req.ServerNames) == 0 {
		return errors.New("certificates: want at least one server name (--server-name)")
	}
	if req.ClientName == "" {
		return errors.New("certificates: want a client name (--client-name)")
	}
	if req.ValidFor <= 0 {
		return fmt.Errorf("certificates: invalid validity %v: want a positive duration", req.ValidFor)
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	caTemplate := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "gpusched-extender-ca"},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(req.ValidFor),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, ca, err := issue(caTemplate, nil, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	server := &x509.Certificate{
		Subject:     pkix.Name{CommonName: req.ServerNames[0]},
		NotBefore:   now.Add(-time.Minute),
		NotAfter:    now.Add(req.ValidFor),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, name := range req.ServerNames {
		if ip := net.ParseIP(name); ip != nil {
			server.IPAddresses = append(server.IPAddresses, ip)
		} else {
			server.DNSNames = append(server.DNSNames, name)
		}
	}
	client := &x509.Certificate{
		Subject:     pkix.Name{CommonName: req.ClientName},
		NotBefore:   now.Add(-time.Minute),
		NotAfter:    now.Add(req.ValidFor),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	files := map[string][]byte{CAFile: pemBlock("CERTIFICATE", caDER)}
	for _, leaf := range []struct {
		template  *x509.Certificate
		cert, key string
	}{{server, ServerCert, ServerKey}, {client, ClientCert, ClientKey}} {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		der, _, err := issue(leaf.template, ca, &key.PublicKey, caKey)
		if err != nil {
			return err
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return err
		}
		files[leaf.cert] = pemBlock("CERTIFICATE", der)
		files[leaf.key] = pemBlock("PRIVATE KEY", keyDER)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("certificates: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil { // MkdirAll keeps an existing directory's mode
		return fmt.Errorf("certificates: %w", err)
	}
	for name, data := range files {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return fmt.Errorf("certificates: %w", err)
		}
		if err := os.Chmod(path, 0o600); err != nil { // WriteFile keeps an existing file's mode
			return fmt.Errorf("certificates: %w", err)
		}
	}
	return nil
}

// issue signs template with signer, as parent (self-signed when parent is
// nil), with a random serial number.
func issue(template, parent *x509.Certificate, pub *ecdsa.PublicKey, signer *ecdsa.PrivateKey) ([]byte, *x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, err
	}
	template.SerialNumber = serial
	if parent == nil {
		parent = template
	}
	der, err := x509.CreateCertificate(rand.Reader, template, parent, pub, signer)
	if err != nil {
		return nil, nil, fmt.Errorf("certificates: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	return der, cert, err
}

func pemBlock(kind string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der})
}
