package playground

import (
	"bytes"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/gpusched/gpusched/examples/workloads"
)

// TestWorkloadScheduler: the scheduler the demo reads from each example
// workload is the one its pod template names, as a YAML decoder reads it.
func TestWorkloadScheduler(t *testing.T) {
	names, files, err := workloads.Files()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		var want string
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(files[name]), 4096)
		for {
			obj := &unstructured.Unstructured{}
			if err := dec.Decode(&obj.Object); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if s, ok, _ := unstructured.NestedString(obj.Object, "spec", "template", "spec", "schedulerName"); ok && want == "" {
				want = s
			}
		}
		if want == "" {
			t.Fatalf("%s names no scheduler in a pod template", name)
		}
		if got := workloadScheduler(files[name]); got != want {
			t.Errorf("%s: read scheduler %q, its pod template names %q", name, got, want)
		}
	}
}

// TestDemoWithGangConfig runs the demo with examples/gpusched-gang-config.yaml,
// whose one profile is gpusched: the training gang, whose pods name
// gpusched, is placed by its GPUGang and runs; the Workload API gang, whose
// pods name gpusched-workload, is skipped with a message saying so, rather
// than left pending for ever; and the demo settles.
func TestDemoWithGangConfig(t *testing.T) {
	_, out := runDemoWith(t, filepath.Join("..", "..", "examples", "gpusched-gang-config.yaml"))
	for _, want := range []string{
		`Skipped examples/workloads/training-workload.yaml: its pods name scheduler "gpusched-workload", and this configuration's profiles are gpusched.`,
		"training-gang.yaml",
		"all pods settled",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "Skipped examples/workloads/training-gang.yaml") {
		t.Errorf("the training gang was skipped:\n%s", out.String())
	}
}

// TestDemoWithEveryExampleConfig runs the demo with each scheduler
// configuration in examples/ that TestDemo and TestDemoWithGangConfig do
// not run: every shipped configuration places the demo's pods and settles,
// its profile's gangs included (the training gang names gpusched, which
// every example's profile is).
func TestDemoWithEveryExampleConfig(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "examples", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ran := 0
	for _, file := range files {
		switch filepath.Base(file) {
		case "gpusched-config.yaml", "gpusched-gang-config.yaml": // TestDemo, TestDemoWithGangConfig
			continue
		}
		ran++
		t.Run(filepath.Base(file), func(t *testing.T) {
			_, out := runDemoWith(t, file)
			if !strings.Contains(out.String(), "all pods settled") {
				t.Errorf("the demo did not settle:\n%s", out.String())
			}
			if strings.Contains(out.String(), "Skipped examples/workloads/training-gang.yaml") {
				t.Errorf("the training gang was skipped:\n%s", out.String())
			}
		})
	}
	if ran == 0 {
		t.Fatal("no example configuration found")
	}
}
