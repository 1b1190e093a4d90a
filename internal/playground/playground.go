// Package playground runs gpusched on a laptop: an in-process control plane
// (internal/controlplane), simulated GPU nodes whose kubelets are kwok's
// controllers and whose GPUs the node agent discovers on go-nvml's mock
// machines (internal/simnode), and the gpusched scheduler with the example
// configuration. With Demo set it places a sample workload and prints where
// every pod went and which GPUs the agent gives its containers; otherwise it
// serves until its context ends, for kubectl.
package playground

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sync/errgroup"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/gpusched/gpusched/internal/controlplane"
	"github.com/gpusched/gpusched/internal/simnode"
	_ "github.com/gpusched/gpusched/pkg/apis/config/scheme" // GPUPlacementArgs in the configuration scheme
	"github.com/gpusched/gpusched/pkg/plugins"
)

// DefaultSchedulerConfig is the scheduler's configuration when Options
// names none: examples/gpusched-config.yaml, a "gpusched" profile with the
// GPUPlacement plugin and the PairFit policy.
//
//go:embed scheduler-config.yaml
var DefaultSchedulerConfig string

// Options configure Run.
type Options struct {
	// Shapes are the simulated GPU nodes; at least one, unless NodeList is
	// set.
	Shapes []NodeShape
	// NodeList, when not empty, are the simulated nodes instead of Shapes'
	// (LoadNodeList); NodesFrom is the file they were read from, for
	// messages.
	NodeList  []ListedNode
	NodesFrom string
	// Demo submits DemoPods, waits until each is placed and running (or
	// found unschedulable), prints the table and returns. Without it Run
	// serves until ctx ends.
	Demo bool
	// Kubeconfig is where the admin kubeconfig is written; it is removed when
	// Run returns. Empty: a file in Run's temporary directory.
	Kubeconfig string
	// SchedulerConfig is a KubeSchedulerConfiguration YAML document; empty
	// means DefaultSchedulerConfig. Its clientConnection.kubeconfig and
	// leader election are overridden; the demo's pods use its first
	// profile's schedulerName.
	SchedulerConfig string
	// DemoTimeout bounds the wait for the demo's pods; 0 means 2 minutes.
	DemoTimeout time.Duration
	// Controllers runs the workload controllers beside the API server
	// (controlplane.Options.Controllers), with ServiceAccount admission on,
	// so Deployments, Jobs and StatefulSets get their pods.
	Controllers bool
	// Verbose keeps the control plane's, the scheduler's and the simulated
	// kubelets' logs (on stderr); otherwise only errors are logged.
	Verbose bool
	// Kueue, when not empty, is a Kueue installation directory
	// (hack/install-kueue.sh): its CRDs and webhooks are installed and its
	// manager runs beside the scheduler (startKueue).
	Kueue string
}

// Run starts the playground, runs the demo or serves, and stops everything
// it started before returning, whatever the outcome. Progress and results
// are written to out. It returns nil after a demo that ran to the end
// (pending pods included: the table says why) and when serving ends because
// ctx ended; an error otherwise, and when ctx ends during a demo.
func Run(ctx context.Context, opts Options, out io.Writer) error {
	start := time.Now()
	listed := opts.NodeList
	if len(listed) == 0 {
		if len(opts.Shapes) == 0 {
			return errors.New("no nodes: give at least one node shape")
		}
		var err error
		if listed, err = shapeNodes(opts.Shapes); err != nil {
			return err
		}
	}
	if opts.Demo && len(demoShapes(opts)) == 0 {
		return fmt.Errorf("the demo needs GPU nodes; %s lists none", opts.NodesFrom)
	}
	nodes := make([]*v1.Node, len(listed))
	for i, l := range listed {
		nodes[i] = l.Node
	}
	var err error
	config := opts.SchedulerConfig
	if config == "" {
		if config, err = PlaygroundConfig(); err != nil {
			return err
		}
	}
	profiles, err := profileNames(config)
	if err != nil {
		return err
	}
	schedulerName := profiles[0]
	if !opts.Verbose {
		// Real failures show in the result (a pod pending with its reason,
		// a container the agent refused, or an error); the control plane's
		// and NRI's benign log lines would only distract.
		controlplane.QuietKlog("FATAL")
		simnode.QuietNRILogs()
	}

	dir, err := os.MkdirTemp("", "gpusched-playground-")
	if err != nil {
		return fmt.Errorf("creating a data directory: %w", err)
	}
	defer os.RemoveAll(dir)
	kubeconfig := opts.Kubeconfig
	if kubeconfig == "" {
		kubeconfig = filepath.Join(dir, "kubeconfig")
	}
	if err := os.MkdirAll(filepath.Dir(kubeconfig), 0o700); err != nil {
		return fmt.Errorf("invalid --kubeconfig: %w", err)
	}
	configPath := filepath.Join(dir, "scheduler-config.yaml")
	if err := writeSchedulerConfig(configPath, config, kubeconfig); err != nil {
		return err
	}

	fmt.Fprintln(out, "Starting etcd and kube-apiserver on 127.0.0.1 ...")
	cp, err := controlplane.Start(controlPlaneOptions(filepath.Join(dir, "controlplane"), opts.Controllers))
	if err != nil {
		return err
	}
	defer cp.Stop()
	if err := cp.WriteKubeconfig(kubeconfig); err != nil {
		return err
	}
	defer os.Remove(kubeconfig)
	apply, err := newApplier(cp.RestConfig)
	if err != nil {
		return err
	}
	if err := installPodGroupCRD(ctx, apply); err != nil {
		return err
	}
	if opts.Controllers {
		fmt.Fprintf(out, "Control plane and controllers up, PodGroup CRD installed, after %s.\n", since(start))
	} else {
		fmt.Fprintf(out, "Control plane up (no controllers), PodGroup CRD installed, after %s.\n", since(start))
	}

	kubeletCtx, stopKubelets := context.WithCancel(ctx)
	defer stopKubelets()
	var kubeletLog io.Writer
	if opts.Verbose {
		kubeletLog = os.Stderr
	}
	if err := startKubelets(kubeletCtx, kubeconfig, kubeletLog); err != nil {
		return err
	}
	if err := createNodes(ctx, cp.Client, nodes); err != nil {
		return err
	}
	if len(opts.NodeList) > 0 {
		fmt.Fprintf(out, "%d simulated nodes from %s (%s) Ready after %s.\n", len(nodes), opts.NodesFrom, listString(listed), since(start))
	} else {
		fmt.Fprintf(out, "%d simulated GPU nodes (%s) Ready after %s.\n", len(nodes), shapesString(opts.Shapes), since(start))
	}

	agents, err := startAgents(ctx, cp.RestConfig, filepath.Join(dir, "nri"), listed)
	if err != nil {
		return err
	}
	defer agents.stop()
	fmt.Fprintf(out, "Node agents published %d GPUs (gpusched.io/gpu-devices, discovered on mock NVML) after %s.\n", countGPUs(listed), since(start))

	sched, err := controlplane.StartScheduler(ctx, configPath, plugins.CommandOptions()...)
	if err != nil {
		return err
	}
	defer sched.Stop()
	fmt.Fprintf(out, "Scheduler %q running after %s.\n", schedulerName, since(start))

	kueueDone := make(<-chan struct{}) // never closed without Kueue
	if opts.Kueue != "" {
		var kueueLog io.Writer
		if opts.Verbose {
			kueueLog = os.Stderr
		}
		kueue, err := startKueue(ctx, apply, cp.Client, kubeconfig, opts.Kueue, dir, kueueLog)
		if err != nil {
			return err
		}
		defer kueue.stop()
		kueueDone = kueue.Done()
		fmt.Fprintf(out, "Kueue's manager (%s) running, its CRDs and webhooks installed, after %s.\n", opts.Kueue, since(start))
	}

	if opts.Demo {
		return runDemo(ctx, cp.Client, apply, agents, opts, profiles, start, out)
	}
	fmt.Fprintf(out, `
The playground is up. In another terminal:

  export KUBECONFIG=%s
  kubectl get nodes -L %s,%s

Pods with "schedulerName: %s" are placed by gpusched (docs/playground.md has examples).
Press Ctrl-C to stop.
`, kubeconfig, "nvidia.com/gpu.product", "nvidia.com/gpu.count", schedulerName)
	select {
	case <-ctx.Done():
	case <-sched.Done():
		return fmt.Errorf("the scheduler stopped: %v", sched.Err())
	case <-kueueDone:
		return errors.New("Kueue's manager stopped; run with --verbose to see its log")
	}
	fmt.Fprintln(out, "Stopping.")
	return nil
}

// WorkloadAPIFlags are the API server's flags that serve the upstream
// Workload API (scheduling.k8s.io/v1beta1 PodGroups) and turn its feature
// gate on; in one process, the scheduler sees the gate too, which
// GangScheduling needs.
var WorkloadAPIFlags = []string{"--feature-gates=GenericWorkload=true", "--runtime-config=scheduling.k8s.io/v1beta1=true"}

// controlPlaneOptions are the playground's control plane's: with the
// controllers and ServiceAccount admission, or neither, and the Workload API.
func controlPlaneOptions(dir string, controllers bool) controlplane.Options {
	flags := controlplane.DefaultAPIServerFlags
	if controllers {
		flags = controlplane.ControllerAPIServerFlags
	}
	return controlplane.Options{
		Dir:            dir,
		APIServerFlags: append(append([]string{}, flags...), WorkloadAPIFlags...),
		Controllers:    controllers,
	}
}

// writeSchedulerConfig writes the scheduler's configuration file: config
// with the playground's kubeconfig and leader election off.
func writeSchedulerConfig(path, config, kubeconfig string) error {
	data, err := controlplane.SchedulerConfig(config, kubeconfig)
	if err != nil {
		return fmt.Errorf("invalid scheduler configuration: %w", err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("writing the scheduler configuration: %w", err)
	}
	return nil
}

// createNodes creates the nodes, up to agentStarts at once, and waits until
// the simulated kubelets have marked every one Ready.
func createNodes(ctx context.Context, client kubernetes.Interface, nodes []*v1.Node) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(agentStarts)
	for _, n := range nodes {
		g.Go(func() error {
			if _, err := client.CoreV1().Nodes().Create(gctx, n, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("creating node %s: %w", n.Name, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		ready := 0
		for _, n := range list.Items {
			for _, c := range n.Status.Conditions {
				if c.Type == v1.NodeReady && c.Status == v1.ConditionTrue {
					ready++
				}
			}
		}
		return ready >= len(nodes), nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the simulated nodes to be Ready: %w", err)
	}
	return nil
}

// profileNames are the schedulerNames of the configuration's profiles, in
// order; a configuration without profiles has the default scheduler's.
func profileNames(config string) ([]string, error) {
	var doc struct {
		Profiles []struct {
			SchedulerName string `json:"schedulerName"`
		} `json:"profiles"`
	}
	if err := yaml.Unmarshal([]byte(config), &doc); err != nil {
		return nil, fmt.Errorf("parsing the scheduler configuration: %w", err)
	}
	var names []string
	for _, p := range doc.Profiles {
		name := p.SchedulerName
		if name == "" {
			name = v1.DefaultSchedulerName
		}
		names = append(names, name)
	}
	if len(names) == 0 {
		names = []string{v1.DefaultSchedulerName}
	}
	return names, nil
}

func shapesString(shapes []NodeShape) string {
	s := ""
	for i, sh := range shapes {
		if i > 0 {
			s += ","
		}
		s += sh.String()
	}
	return s
}

// listString renders listed nodes as their shapes in the --nodes form,
// largest group first, and how many have no GPU.
func listString(listed []ListedNode) string {
	s := shapesString(NodeListShapes(listed))
	if cpu := len(listed) - countGPUNodes(listed); cpu > 0 {
		if s != "" {
			s += ","
		}
		s += fmt.Sprintf("%d without GPUs", cpu)
	}
	return s
}

func countGPUNodes(listed []ListedNode) int {
	n := 0
	for _, l := range listed {
		if l.GPUs.GPUs > 0 {
			n++
		}
	}
	return n
}

func countGPUs(listed []ListedNode) int {
	n := 0
	for _, l := range listed {
		n += l.GPUs.GPUs
	}
	return n
}

// shapeNodes are the nodes of shapes (Nodes), each with its shape.
func shapeNodes(shapes []NodeShape) ([]ListedNode, error) {
	nodes, err := Nodes(shapes)
	if err != nil {
		return nil, err
	}
	out := make([]ListedNode, 0, len(nodes))
	for _, s := range shapes {
		for range s.Count {
			out = append(out, ListedNode{Node: nodes[len(out)], GPUs: s})
		}
	}
	return out, nil
}

// demoShapes are the shapes of the nodes the demo's workload is made for.
func demoShapes(opts Options) []NodeShape {
	if len(opts.NodeList) > 0 {
		return NodeListShapes(opts.NodeList)
	}
	return opts.Shapes
}

func since(t time.Time) time.Duration { return time.Since(t).Round(10 * time.Millisecond) }
