package playground

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpusched/gpusched/internal/chromiumtest"
)

// browserPage is a page of a headless Chromium that the test drives over
// the DevTools protocol: it stays open, so scripts that run on (Server-Sent
// Events, timers) can be watched, which --dump-dom cannot do.
type browserPage struct {
	conn *websocket.Conn
	next int
}

// openPage starts headless Chromium on url with remote debugging on a
// loopback port and connects to its page. Chromium is stopped when the test
// ends.
func openPage(ctx context.Context, t *testing.T, chromium, url string) *browserPage {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command(chromium, append(chromiumtest.Flags(dir), "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0", "--window-size=1400,900", url)...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	// Chromium writes the port it chose to DevToolsActivePort.
	var port string
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		f, err := os.Open(filepath.Join(dir, "DevToolsActivePort"))
		if err != nil {
			return false, nil
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		if sc.Scan() && sc.Text() != "" {
			port = sc.Text()
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("chromium did not open its debugging port: %v", err)
	}
	var wsURL string
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		resp, err := http.Get("http://127.0.0.1:" + port + "/json/list")
		if err != nil {
			return false, nil
		}
		defer resp.Body.Close()
		var targets []struct{ Type, URL, WebSocketDebuggerURL string }
		if json.NewDecoder(resp.Body).Decode(&targets) != nil {
			return false, nil
		}
		for _, tg := range targets {
			if tg.Type == "page" && strings.HasPrefix(tg.URL, url) {
				wsURL = tg.WebSocketDebuggerURL
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("chromium has no page of %s: %v", url, err)
	}
	conn, _, err := websocket.DefaultDialer.DialContext(ctx, wsURL, nil)
	if err != nil {
		t.Fatalf("connecting to the page: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	return &browserPage{conn: conn}
}

// eval evaluates a JavaScript expression in the page and decodes its value
// into out; it fails the test if that cannot be done.
func (p *browserPage) eval(t *testing.T, expr string, out any) {
	t.Helper()
	if err := p.evaluate(expr, out); err != nil {
		t.Fatal(err)
	}
}

// evaluate is eval returning its error: the connection's, or the script's
// (an exception, e.g. while the page is still loading).
func (p *browserPage) evaluate(expr string, out any) error {
	p.next++
	id := p.next
	req := map[string]any{"id": id, "method": "Runtime.evaluate",
		"params": map[string]any{"expression": expr, "returnByValue": true}}
	p.conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if err := p.conn.WriteJSON(req); err != nil {
		return fmt.Errorf("evaluating %s: %w", expr, err)
	}
	for {
		p.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		var resp struct {
			ID     int `json:"id"`
			Result struct {
				Result struct {
					Value json.RawMessage `json:"value"`
				} `json:"result"`
				ExceptionDetails *struct {
					Text      string
					Exception struct{ Description string }
				} `json:"exceptionDetails"`
			} `json:"result"`
			Error *struct{ Message string } `json:"error"`
		}
		if err := p.conn.ReadJSON(&resp); err != nil {
			return fmt.Errorf("evaluating %s: %w", expr, err)
		}
		if resp.ID != id {
			continue // an event, or an older answer
		}
		switch {
		case resp.Error != nil:
			return fmt.Errorf("evaluating %s: %s", expr, resp.Error.Message)
		case resp.Result.ExceptionDetails != nil:
			return fmt.Errorf("evaluating %s: %s %s", expr, resp.Result.ExceptionDetails.Text, resp.Result.ExceptionDetails.Exception.Description)
		}
		if err := json.Unmarshal(resp.Result.Result.Value, out); err != nil {
			return fmt.Errorf("evaluating %s: value %s: %w", expr, resp.Result.Result.Value, err)
		}
		return nil
	}
}

// waitFor polls a boolean expression in the page until it is true.
func (p *browserPage) waitFor(ctx context.Context, t *testing.T, expr string, timeout time.Duration) {
	t.Helper()
	var ok bool
	var last error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		ok = false
		last = p.evaluate(expr, &ok) // an exception counts as false: the page may be loading
		return ok, nil
	})
	if err != nil {
		var html string
		_ = p.evaluate("document.documentElement.outerHTML", &html)
		t.Fatalf("the page never got %s: %v (last error: %v)\n%.3000s", expr, err, last, html)
	}
}
