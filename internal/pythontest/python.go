// Package pythontest finds the Python the tests run gpusched's Python
// package with: Debian's python3, whose numpy, grpcio and protobuf are the
// only Python packages the project uses.
package pythontest

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// debianPackages maps a module the tests import to the Debian package that
// provides it.
var debianPackages = map[string]string{
	"numpy":           "python3-numpy",
	"grpc":            "python3-grpcio",
	"google.protobuf": "python3-protobuf",
}

// Python is a python3 that imports every module of modules:
// $GPUSCHED_PYTHON, /usr/bin/python3 or python3, the first that does.
// Without one the test skips, saying what to install, or fails when $CI is
// set.
func Python(t testing.TB, modules ...string) string {
	t.Helper()
	check := "import " + strings.Join(modules, ", ")
	for _, p := range []string{os.Getenv("GPUSCHED_PYTHON"), "/usr/bin/python3", "python3"} {
		if p != "" && exec.Command(p, "-c", check).Run() == nil {
			return p
		}
	}
	var pkgs []string
	for _, m := range modules {
		pkgs = append(pkgs, debianPackages[m])
	}
	msg := "no python3 with " + strings.Join(modules, ", ") + "; install them with: apt-get install " + strings.Join(pkgs, " ")
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}
