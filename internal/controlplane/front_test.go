package controlplane

import (
	"bufio"
	"net"
	"testing"
	"time"
)

// startEcho runs a loopback TCP server that writes back every line it
// reads, prefixed with tag.
func startEcho(t *testing.T, tag string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				lines := bufio.NewScanner(c)
				for lines.Scan() {
					if _, err := c.Write([]byte(tag + lines.Text() + "\n")); err != nil {
						return
					}
				}
			}()
		}
	}()
	return l.Addr().String()
}

// roundTrip sends line over c and returns the answer.
func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, line string) (string, error) {
	t.Helper()
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		return "", err
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := r.ReadString('\n')
	return got, err
}

// TestFrontDelaysAndSwitches checks the front the fault-injecting control
// plane puts before etcd and the API server: it forwards, a delay makes each
// round trip take at least the delay, switching the backend cuts open
// connections and sends new ones to the new backend, and no backend refuses
// them.
func TestFrontDelaysAndSwitches(t *testing.T) {
	f, err := newFront(startEcho(t, "a:"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.close()

	c, err := net.Dial("tcp", f.addr())
	if err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	if got, err := roundTrip(t, c, r, "hello"); err != nil || got != "a:hello\n" {
		t.Fatalf("through the front: %q, %v; want %q", got, err, "a:hello\n")
	}

	const delay = 150 * time.Millisecond
	f.setDelay(delay)
	start := time.Now()
	if got, err := roundTrip(t, c, r, "slow"); err != nil || got != "a:slow\n" {
		t.Fatalf("with a delay: %q, %v", got, err)
	}
	if took := time.Since(start); took < delay {
		t.Errorf("a round trip took %v with a %v delay", took, delay)
	}
	f.setDelay(0)

	f.setBackend(startEcho(t, "b:"))
	if got, err := roundTrip(t, c, r, "old"); err == nil {
		t.Errorf("the connection opened before the switch still answers: %q", got)
	}
	c2, err := net.Dial("tcp", f.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if got, err := roundTrip(t, c2, bufio.NewReader(c2), "new"); err != nil || got != "b:new\n" {
		t.Fatalf("after the switch: %q, %v; want %q", got, err, "b:new\n")
	}

	f.setBackend("")
	c3, err := net.Dial("tcp", f.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if got, err := roundTrip(t, c3, bufio.NewReader(c3), "none"); err == nil {
		t.Errorf("with no backend the front answered %q", got)
	}
}
