package playground

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func TestFlags(t *testing.T) {
	config := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(config, []byte("profiles:\n- schedulerName: mine\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f := NewFlags()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	f.AddFlags(fs)
	if err := fs.Parse([]string{"--nodes=1xL4-24GB:2", "--config=" + config, "--kubeconfig=/x/kc"}); err != nil {
		t.Fatal(err)
	}
	opts, err := f.Options()
	if err != nil {
		t.Fatal(err)
	}
	if len(opts.Shapes) != 1 || opts.Shapes[0].Model != "L4-24GB" || opts.Kubeconfig != "/x/kc" || opts.Demo {
		t.Errorf("options %+v", opts)
	}
	if names, err := profileNames(opts.SchedulerConfig); err != nil || len(names) == 0 || names[0] != "mine" {
		t.Errorf("scheduler names %q, %v", names, err)
	}

	f.Demo = true
	if opts, err := f.Options(); err != nil || opts.Kubeconfig != "" {
		t.Errorf("the demo writes its kubeconfig in its own directory: %q, %v", opts.Kubeconfig, err)
	}

	f.ConfigFile = filepath.Join(t.TempDir(), "missing.yaml")
	if _, err := f.Options(); err == nil || !strings.Contains(err.Error(), "--config") || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("missing --config file: %v", err)
	}
	f.ConfigFile, f.Nodes = "", "8xA100"
	if _, err := f.Options(); err == nil || !strings.Contains(err.Error(), `"8xA100"`) {
		t.Errorf("bad --nodes: %v", err)
	}

	list := filepath.Join(t.TempDir(), "nodes.csv")
	if err := os.WriteFile(list, []byte("sn,cpu_milli,memory_mib,gpu,model\nn0,8000,32768,2,T4\nn1,8000,32768,0,\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f.Nodes, f.NodesFrom = DefaultNodes, list
	opts, err = f.Options()
	if err != nil || len(opts.NodeList) != 2 || opts.Shapes != nil || opts.NodesFrom != list || opts.NodeList[0].GPUs.GPUs != 2 {
		t.Errorf("--nodes-from: %+v, %v", opts, err)
	}
	f.Nodes = "1xT4-16GB:4"
	if _, err := f.Options(); err == nil || !strings.Contains(err.Error(), "give one of them") {
		t.Errorf("--nodes with --nodes-from: %v", err)
	}
}
