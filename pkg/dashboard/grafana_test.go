package dashboard

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// exportedMetrics maps every metric name the collector can export (per-GPU
// metrics on) to its label names, read from its Describe output.
func exportedMetrics(t *testing.T) map[string][]string {
	t.Helper()
	ch := make(chan *prometheus.Desc, 64)
	NewCollector(nil, true).Describe(ch)
	close(ch)
	descRE := regexp.MustCompile(`fqName: "([^"]+)".*variableLabels: \{([^}]*)\}`)
	out := map[string][]string{}
	for d := range ch {
		m := descRE.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("cannot read the descriptor %s", d)
		}
		var labels []string
		if m[2] != "" {
			labels = strings.Split(m[2], ",")
		}
		out[m[1]] = labels
	}
	if len(out) < 10 {
		t.Fatalf("only %d metrics described: %v", len(out), out)
	}
	return out
}

// TestDashboardGrafanaUsesExportedMetrics parses deploy/grafana's dashboard
// and checks that every panel queries at least one gpusched metric, that
// every gpusched metric named in a panel's or a variable's query is one the
// collector exports, and that every label a selector matches on is one of
// that metric's labels.
func TestDashboardGrafanaUsesExportedMetrics(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "deploy", "grafana", "gpusched-gpus.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("deploy/grafana/gpusched-gpus.json is not valid JSON: %v", err)
	}
	exported := exportedMetrics(t)
	if len(dash.Panels) < 5 {
		t.Fatalf("%d panels, want at least 5", len(dash.Panels))
	}
	queries := map[string][]string{} // where -> queries
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			queries["panel "+p.Title] = append(queries["panel "+p.Title], tg.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		if q, ok := v.Query.(map[string]any); ok {
			if s, ok := q["query"].(string); ok {
				queries["variable "+v.Name] = append(queries["variable "+v.Name], s)
			}
		}
	}
	metricRE := regexp.MustCompile(`\bgpusched_[a-z0-9_]+`)
	selectorRE := regexp.MustCompile(`\b(gpusched_[a-z0-9_]+)\{([^}]*)\}`)
	matcherRE := regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)`)
	used := map[string]bool{}
	for where, qs := range queries {
		found := false
		for _, q := range qs {
			for _, name := range metricRE.FindAllString(q, -1) {
				found = true
				used[name] = true
				if _, ok := exported[name]; !ok {
					t.Errorf("%s queries %s, which the collector does not export (%q)", where, name, q)
				}
			}
			for _, sel := range selectorRE.FindAllStringSubmatch(q, -1) {
				for _, m := range matcherRE.FindAllStringSubmatch(sel[2], -1) {
					if labels, ok := exported[sel[1]]; ok && !slices.Contains(labels, m[1]) {
						t.Errorf("%s matches %s on label %q; its labels are %v", where, sel[1], m[1], labels)
					}
				}
			}
		}
		if !found && strings.HasPrefix(where, "panel ") {
			t.Errorf("%s queries no gpusched metric", where)
		}
	}
	for _, name := range []string{"gpusched_cluster_fragmented_milli", "gpusched_cluster_gpu_allocated_milli",
		"gpusched_pending_gpu_pods", "gpusched_node_fragmented_milli", "gpusched_gpu_allocated_milli"} {
		if !used[name] {
			t.Errorf("no panel shows %s", name)
		}
	}
}
