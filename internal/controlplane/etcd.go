package controlplane

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// etcdStartTimeout bounds how long Start waits for embedded etcd to become
// ready.
const etcdStartTimeout = time.Minute

// startEtcd starts a single-member embedded etcd with its data under dir and
// returns it with its client URL. Only errors are logged, and only when
// logErrors is set.
//
// Ports are chosen by briefly listening on 127.0.0.1:0; because another
// process could take a port between that probe and etcd binding it, a bind
// failure is retried with fresh ports a few times.
func startEtcd(dir string, logErrors bool) (*embed.Etcd, string, error) {
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		e, clientURL, err := tryStartEtcd(filepath.Join(dir, strconv.Itoa(attempt)), logErrors)
		if err == nil {
			return e, clientURL, nil
		}
		lastErr = err
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	return nil, "", lastErr
}

func tryStartEtcd(dir string, logErrors bool) (*embed.Etcd, string, error) {
	ports, err := freeLoopbackPorts(2)
	if err != nil {
		return nil, "", err
	}
	clientURL := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))}
	peerURL := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1]))}

	cfg := embed.NewConfig()
	cfg.Name = "gpusched"
	cfg.Dir = dir
	cfg.ListenClientUrls = []url.URL{clientURL}
	cfg.AdvertiseClientUrls = []url.URL{clientURL}
	cfg.ListenPeerUrls = []url.URL{peerURL}
	cfg.AdvertisePeerUrls = []url.URL{peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = "error"
	if !logErrors {
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	}
	// The data lives only as long as the control plane: durability only
	// costs time.
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
