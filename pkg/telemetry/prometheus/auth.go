package prometheus

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"
)

// Auth is how gpusched authenticates to Prometheus. Secrets are read from
// files, again on every request, so a rotated token or password takes effect
// without a restart.
type Auth struct {
	// BearerTokenFile holds a token sent as "Authorization: Bearer <token>".
	BearerTokenFile string
	// BasicAuthUsername and BasicAuthPasswordFile set HTTP basic auth.
	BasicAuthUsername     string
	BasicAuthPasswordFile string
	// CAFile is a PEM bundle that verifies the server's certificate, for an
	// https Address signed by a private CA.
	CAFile string
	// InsecureSkipVerify disables server certificate verification.
	InsecureSkipVerify bool
}

// roundTripper returns the transport for a, checking that its files are readable.
func (a *Auth) roundTripper() (http.RoundTripper, error) {
	if a.BearerTokenFile != "" && a.BasicAuthUsername != "" {
		return nil, errors.New("bearer token file and basic auth are both set: want at most one")
	}
	tr := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		TLSHandshakeTimeout: 10 * time.Second,
		MaxIdleConnsPerHost: 2,
		IdleConnTimeout:     90 * time.Second,
	}
	if a.CAFile != "" || a.InsecureSkipVerify {
		tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: a.InsecureSkipVerify} //nolint:gosec // the user's explicit choice
		if a.CAFile != "" {
			pem, err := os.ReadFile(a.CAFile)
			if err != nil {
				return nil, fmt.Errorf("CA file: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("CA file %s: no PEM certificate in it", a.CAFile)
			}
			tr.TLSClientConfig.RootCAs = pool
		}
	}
	for _, f := range []string{a.BearerTokenFile, a.BasicAuthPasswordFile} {
		if f != "" {
			if _, err := readSecret(f); err != nil {
				return nil, err
			}
		}
	}
	if a.BearerTokenFile == "" && a.BasicAuthUsername == "" {
		return tr, nil
	}
	return &authRoundTripper{auth: *a, next: tr}, nil
}

type authRoundTripper struct {
	auth Auth
	next http.RoundTripper
}

func (rt *authRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	switch {
	case rt.auth.BearerTokenFile != "":
		token, err := readSecret(rt.auth.BearerTokenFile)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+token)
	case rt.auth.BasicAuthUsername != "":
		password := ""
		if rt.auth.BasicAuthPasswordFile != "" {
			p, err := readSecret(rt.auth.BasicAuthPasswordFile)
			if err != nil {
				return nil, err
			}
			password = p
		}
		req.SetBasicAuth(rt.auth.BasicAuthUsername, password)
	}
	return rt.next.RoundTrip(req)
}

// readSecret reads a secret file, without its trailing newline.
func readSecret(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading secret file: %w", err)
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}
