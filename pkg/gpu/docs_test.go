package gpu_test

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/pkg/gpu"
)

var update = flag.Bool("update", false, "rewrite the generated parts of the docs")

// policiesDoc is the page whose table of policies is generated from the
// registry, between these markers.
const (
	policiesDoc   = "../../docs/policies.md"
	policiesBegin = "<!-- policies:begin -->\n"
	policiesEnd   = "<!-- policies:end -->\n"
)

// policyTable is the registry as a Markdown table.
func policyTable() string {
	var b strings.Builder
	b.WriteString("| type | what it prefers | shapes | host | weights |\n|---|---|---|---|---|\n")
	mark := func(v bool) string {
		if v {
			return "✓"
		}
		return ""
	}
	for _, info := range gpu.Policies() {
		name := "`" + string(info.Type) + "`"
		if info.Type == gpu.DefaultPolicy {
			name += " (default)"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", name, info.Summary, mark(info.NeedsShapes), mark(info.HostAware), mark(info.Weighted))
	}
	return b.String()
}

// TestPolicyDocs: docs/policies.md lists exactly the registered policies.
// With -update it rewrites the table from the registry.
func TestPolicyDocs(t *testing.T) {
	raw, err := os.ReadFile(policiesDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	begin, end := strings.Index(doc, policiesBegin), strings.Index(doc, policiesEnd)
	if begin < 0 || end < begin {
		t.Fatalf("%s: no %q ... %q block", policiesDoc, policiesBegin, policiesEnd)
	}
	want := policyTable()
	got := doc[begin+len(policiesBegin) : end]
	if got == want {
		return
	}
	if !*update {
		t.Fatalf("%s lists other policies than the registry; run go test ./pkg/gpu -run TestPolicyDocs -update\ngot:\n%s\nwant:\n%s", policiesDoc, got, want)
	}
	doc = doc[:begin+len(policiesBegin)] + want + doc[end:]
	if err := os.WriteFile(policiesDoc, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
}
