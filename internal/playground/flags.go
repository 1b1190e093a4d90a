package playground

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/pflag"
)

// Flags are the playground command's flags.
type Flags struct {
	Demo        bool
	Nodes       string
	NodesFrom   string
	Kubeconfig  string
	ConfigFile  string
	Controllers bool
	Verbose     bool
	Kueue       string
}

// NewFlags returns the flags' defaults.
func NewFlags() *Flags {
	return &Flags{
		Nodes:       DefaultNodes,
		Controllers: true,
		Kubeconfig:  filepath.Join(os.TempDir(), "gpusched-playground", "kubeconfig"),
	}
}

// AddFlags registers the flags on fs.
func (f *Flags) AddFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&f.Demo, "demo", f.Demo, "place a sample GPU workload, print where every pod went, and exit")
	fs.StringVar(&f.Nodes, "nodes", f.Nodes, "simulated GPU nodes, comma-separated "+NodeShapeForm)
	fs.StringVar(&f.NodesFrom, "nodes-from", f.NodesFrom, "build the simulated nodes from the node list in `FILE` instead of --nodes: the Alibaba GPU trace's node CSV (sn,cpu_milli,memory_mib,gpu,model; a .csv file) or the output of kubectl get nodes -o yaml (.yaml, .yml or .json)")
	fs.StringVar(&f.Kubeconfig, "kubeconfig", f.Kubeconfig, "where to write the playground's kubeconfig (removed on exit)")
	fs.StringVar(&f.ConfigFile, "config", f.ConfigFile, "a KubeSchedulerConfiguration file for the scheduler (default: examples/gpusched-config.yaml, built in)")
	fs.BoolVar(&f.Controllers, "controllers", f.Controllers, "run the Deployment, ReplicaSet, Job, StatefulSet, garbage-collector, namespace, ServiceAccount and resource quota controllers (--controllers=false: bare Pods only, and no example workloads in the demo)")
	fs.BoolVar(&f.Verbose, "verbose", f.Verbose, "log the control plane, the scheduler and the simulated kubelets on stderr")
	fs.StringVar(&f.Kueue, "kueue", f.Kueue, "run Kueue beside gpusched: its manager, CRDs and webhooks from the installation in `DIR` (bash hack/install-kueue.sh prints it; docs/quotas.md); off when empty")
}

// Options validates the flags and turns them into Run's options: the
// --nodes value parsed or the --nodes-from file read (not both), the
// --config file read.
func (f *Flags) Options() (Options, error) {
	opts := Options{Demo: f.Demo, Verbose: f.Verbose, Kubeconfig: f.Kubeconfig, Controllers: f.Controllers, Kueue: f.Kueue}
	if f.Kueue != "" && !f.Controllers {
		return Options{}, fmt.Errorf("--kueue %s needs the controllers (--controllers=false): Kueue admits Jobs and Deployments, which need them", f.Kueue)
	}
	var err error
	if f.NodesFrom != "" {
		if f.Nodes != DefaultNodes {
			return Options{}, fmt.Errorf("--nodes %q and --nodes-from %q: give one of them", f.Nodes, f.NodesFrom)
		}
		if opts.NodeList, err = LoadNodeList(f.NodesFrom); err != nil {
			return Options{}, err
		}
		opts.NodesFrom = f.NodesFrom
	} else if opts.Shapes, err = ParseNodeShapes(f.Nodes); err != nil {
		return Options{}, err
	}
	if f.Demo {
		opts.Kubeconfig = "" // the demo needs none outside its own directory
	}
	if f.ConfigFile != "" {
		raw, err := os.ReadFile(f.ConfigFile)
		if err != nil {
			return Options{}, fmt.Errorf("invalid --config: %w", err)
		}
		opts.SchedulerConfig = string(raw)
	}
	return opts, nil
}
