package controlplane

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// front is a loopback TCP listener that forwards every connection to a
// backend address the caller may change or remove, delaying what clients
// send by a duration the caller may change. It is how a control plane
// started with Options.Faults restarts its API server behind one address
// and slows etcd down.
type front struct {
	listener net.Listener
	delay    atomic.Int64 // nanoseconds added to each chunk sent to the backend

	mu      sync.Mutex
	backend string // host:port; "" refuses connections
	conns   map[net.Conn]struct{}
	closed  bool
	wg      sync.WaitGroup
}

// newFront listens on 127.0.0.1 and forwards to backend.
func newFront(backend string) (*front, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f := &front{listener: l, backend: backend, conns: map[net.Conn]struct{}{}}
	f.wg.Go(f.serve)
	return f, nil
}

// addr is the front's host:port.
func (f *front) addr() string { return f.listener.Addr().String() }

// setBackend forwards new connections to backend ("" refuses them) and
// closes every connection open now, as a server going away would.
func (f *front) setBackend(backend string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.backend = backend
	for c := range f.conns {
		c.Close()
	}
}

// setDelay delays each chunk a client sends by d before it reaches the
// backend. Chunks keep their order; the delay adds latency, not a limit
// on throughput.
func (f *front) setDelay(d time.Duration) { f.delay.Store(int64(d)) }

// close stops listening, closes every connection and waits for the
// forwarding goroutines.
func (f *front) close() {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	f.listener.Close()
	f.setBackend("")
	f.wg.Wait()
}

func (f *front) serve() {
	for {
		client, err := f.listener.Accept()
		if err != nil {
			return
		}
		f.mu.Lock()
		backend, closed := f.backend, f.closed
		f.mu.Unlock()
		if backend == "" || closed {
			client.Close()
			continue
		}
		server, err := net.DialTimeout("tcp", backend, 5*time.Second)
		if err != nil {
			client.Close()
			continue
		}
		if !f.track(client, server, backend) {
			continue
		}
		f.wg.Go(func() {
			defer f.untrack(client, server)
			var both sync.WaitGroup
			both.Go(func() { f.forwardDelayed(server, client) })
			both.Go(func() { forward(client, server) })
			both.Wait()
		})
	}
}

// track registers both ends of a connection to backend so setBackend can
// close them; it reports false, having closed them, if the backend changed
// meanwhile.
func (f *front) track(client, server net.Conn, backend string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed || f.backend != backend {
		client.Close()
		server.Close()
		return false
	}
	f.conns[client], f.conns[server] = struct{}{}, struct{}{}
	return true
}

func (f *front) untrack(client, server net.Conn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	client.Close()
	server.Close()
	delete(f.conns, client)
	delete(f.conns, server)
}

// forward copies src to dst until either fails, then closes both.
func forward(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	dst.Close()
	src.Close()
}

// chunk is data read from a client, due at the backend at a moment.
type chunk struct {
	data []byte
	due  time.Time
}

// forwardDelayed copies src to dst, each chunk f.delay after it was read.
func (f *front) forwardDelayed(dst, src net.Conn) {
	chunks := make(chan chunk, 1024)
	var writer sync.WaitGroup
	writer.Go(func() {
		defer dst.Close()
		for c := range chunks {
			time.Sleep(time.Until(c.due))
			if _, err := dst.Write(c.data); err != nil {
				src.Close()
				for range chunks { // let the reader finish
				}
				return
			}
		}
	})
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			chunks <- chunk{data: append([]byte(nil), buf[:n]...), due: time.Now().Add(time.Duration(f.delay.Load()))}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				src.Close()
			}
			break
		}
	}
	close(chunks)
	writer.Wait()
}
