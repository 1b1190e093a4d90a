package importrules

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// module is the module path, which the table leaves out of gpusched's
// package paths.
const module = "github.com/gpusched/gpusched"

// tableHeading starts the section of docs/architecture.md with the table.
const tableHeading = "## Packages and what they may import"

// rule is one row of the table.
type rule struct {
	// any: the package may import anything.
	any bool
	// std and external: it may import the standard library, and any
	// module but gpusched.
	std, external bool
	// prefixes are the other paths it may import: an external path and
	// everything under it, or a gpusched package exactly (module-relative).
	prefixes []string
	// never are the modules that must not be among its dependencies.
	never []string
}

// pkg is what the check reads of `go list -json`.
type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

// isStd says whether an import path is the standard library's (its first
// element has no dot; "C" is cgo's).
func isStd(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".")
}

// under says whether path is prefix or a path below it.
func under(path, prefix string) bool {
	return path == prefix || strings.HasPrefix(path, prefix+"/")
}

// violations are the imports and dependencies of p its rule does not allow.
func (r rule) violations(p pkg) []string {
	var out []string
	if !r.any {
		for _, imp := range p.Imports {
			own, isOwn := strings.CutPrefix(imp, module+"/")
			allowed := false
			switch {
			case isOwn:
				allowed = slices.Contains(r.prefixes, own)
			case isStd(imp):
				allowed = r.std
			default:
				allowed = r.external || slices.ContainsFunc(r.prefixes, func(p string) bool { return under(imp, p) })
			}
			if !allowed {
				out = append(out, "imports "+imp)
			}
		}
	}
	for _, never := range r.never {
		if i := slices.IndexFunc(p.Deps, func(d string) bool { return under(d, never) }); i >= 0 {
			out = append(out, fmt.Sprintf("depends on %s (%s)", never, p.Deps[i]))
		}
	}
	return out
}

// parseTable reads the table of the section tableHeading of a Markdown
// document: | `package` | job | may import | never depends on |, each cell
// of the last two a comma-separated list of `items`.
func parseTable(doc io.Reader) (map[string]rule, error) {
	rules := map[string]rule{}
	in := false
	sc := bufio.NewScanner(doc)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			in = line == tableHeading
			continue
		}
		if !in || !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 4 {
			return nil, fmt.Errorf("row %q: %d cells, want 4 (package, job, may import, never depends on)", line, len(cells))
		}
		name := strings.Trim(strings.TrimSpace(cells[0]), "`")
		if _, dup := rules[name]; dup {
			return nil, fmt.Errorf("package %s has two rows", name)
		}
		var r rule
		for _, item := range items(cells[2]) {
			switch item {
			case "any":
				r.any = true
			case "std":
				r.std = true
			case "external":
				r.external = true
			default:
				r.prefixes = append(r.prefixes, item)
			}
		}
		if !r.any && !r.std {
			return nil, fmt.Errorf("package %s: may import %q: want `any`, or a list with `std`", name, strings.TrimSpace(cells[2]))
		}
		r.never = items(cells[3])
		rules[name] = r
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(rules) == 0 {
		return nil, fmt.Errorf("no table under %q", tableHeading)
	}
	return rules, nil
}

// items are the `backticked` items of a cell.
func items(cell string) []string {
	var out []string
	for _, f := range strings.Split(cell, ",") {
		if f = strings.Trim(strings.TrimSpace(f), "`"); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// TestImportRules: every package of the module has a row in
// docs/architecture.md's table, every row is a package, and no package
// imports or depends on what its row does not allow.
func TestImportRules(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not on PATH")
	}
	root := filepath.Join("..", "..")
	doc, err := os.Open(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer doc.Close()
	rules, err := parseTable(doc)
	if err != nil {
		t.Fatalf("docs/architecture.md: %v", err)
	}
	cmd := exec.Command(goTool, "list", "-json=ImportPath,Imports,Deps", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	listed := map[string]bool{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		name := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		listed[name] = true
		r, ok := rules[name]
		if !ok {
			t.Errorf("package %s has no row in docs/architecture.md (%s): add one with its job and import rules", name, tableHeading)
			continue
		}
		for _, v := range r.violations(p) {
			t.Errorf("package %s %s, which its row in docs/architecture.md does not allow", name, v)
		}
	}
	if !listed["pkg/gpu"] || !listed["pkg/plugins/gpuplacement"] {
		t.Fatalf("go list did not list the module's packages: %s", out[:min(len(out), 500)])
	}
	for name := range rules {
		if !listed[name] {
			t.Errorf("docs/architecture.md has a row for %s, which is not a package of the module", name)
		}
	}
}

// TestViolations: the check catches each kind of breach, on made-up
// packages.
func TestViolations(t *testing.T) {
	engine := rule{std: true, prefixes: []string{"k8s.io/api", "pkg/packing"}, never: []string{"k8s.io/kubernetes"}}
	tests := []struct {
		name string
		r    rule
		p    pkg
		want []string
	}{
		{"allowed", engine, pkg{Imports: []string{"fmt", "k8s.io/api/core/v1", module + "/pkg/packing"}, Deps: []string{"k8s.io/apimachinery/pkg/types"}}, nil},
		{"another gpusched package", engine, pkg{Imports: []string{module + "/pkg/plugins"}}, []string{"imports " + module + "/pkg/plugins"}},
		{"a gpusched package below an allowed one", engine, pkg{Imports: []string{module + "/pkg/packing/sub"}}, []string{"imports " + module + "/pkg/packing/sub"}},
		{"a module with a common prefix", engine, pkg{Imports: []string{"k8s.io/apiserver/pkg/server"}}, []string{"imports k8s.io/apiserver/pkg/server"}},
		{"a dependency at depth", engine, pkg{Deps: []string{"k8s.io/kubernetes/pkg/scheduler"}}, []string{"depends on k8s.io/kubernetes (k8s.io/kubernetes/pkg/scheduler)"}},
		{"no std", rule{external: true}, pkg{Imports: []string{"fmt"}}, []string{"imports fmt"}},
		{"external", rule{std: true, external: true}, pkg{Imports: []string{"k8s.io/klog/v2", module + "/pkg/gpu"}}, []string{"imports " + module + "/pkg/gpu"}},
		{"any", rule{any: true}, pkg{Imports: []string{module + "/pkg/plugins", "k8s.io/kubernetes/pkg/scheduler"}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.r.violations(tt.p); !slices.Equal(got, tt.want) {
				t.Errorf("violations = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestParseTable: rows become rules; a row without `std` or `any`, or with
// the wrong number of cells, is an error naming it.
func TestParseTable(t *testing.T) {
	doc := tableHeading + "\n\n| package | job | may import | never depends on |\n|---|---|---|---|\n" +
		"| `pkg/gpu` | the engine | `std`, `k8s.io/api`, `pkg/packing` | `k8s.io/kubernetes` |\n" +
		"| `cmd/x` | a binary | `any` | |\n\n## Next\n\n| `pkg/ignored` | after the section | `nothing` | |\n"
	rules, err := parseTable(strings.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	if r := rules["pkg/gpu"]; !r.std || r.external || r.any || !slices.Equal(r.prefixes, []string{"k8s.io/api", "pkg/packing"}) || !slices.Equal(r.never, []string{"k8s.io/kubernetes"}) {
		t.Errorf("pkg/gpu: %+v", r)
	}
	if r := rules["cmd/x"]; !r.any || len(r.never) != 0 {
		t.Errorf("cmd/x: %+v", r)
	}
	if _, ok := rules["pkg/ignored"]; ok || len(rules) != 2 {
		t.Errorf("rules %v, want pkg/gpu and cmd/x only", rules)
	}
	for _, bad := range []string{
		tableHeading + "\n| `pkg/a` | job | `k8s.io/api` | |\n",
		tableHeading + "\n| `pkg/a` | job | `std` |\n",
		tableHeading + "\n| `pkg/a` | job | `std` | |\n| `pkg/a` | job | `std` | |\n",
		"## Other\n| `pkg/a` | job | `std` | |\n",
	} {
		if _, err := parseTable(strings.NewReader(bad)); err == nil {
			t.Errorf("parseTable(%q): no error", bad)
		}
	}
}
