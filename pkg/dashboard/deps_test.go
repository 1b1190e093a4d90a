package dashboard

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDashboardImportsNoKubernetes: the dashboard is built from client-go,
// apimachinery and the engine only, never k8s.io/kubernetes, so that a
// binary that shows it stays small and quick to build.
func TestDashboardImportsNoKubernetes(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not on PATH")
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if pkg == "k8s.io/kubernetes" || strings.HasPrefix(pkg, "k8s.io/kubernetes/") {
			t.Errorf("pkg/dashboard depends on %s", pkg)
		}
	}
	if !strings.Contains(string(out), "k8s.io/client-go/informers\n") {
		t.Errorf("go list -deps does not list client-go's informers: the check reads the wrong package list\n%.500s", out)
	}
}
