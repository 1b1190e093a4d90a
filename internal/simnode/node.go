// Package simnode runs gpusched's node agent for a simulated GPU node, in
// process: the agent's discovery over one of go-nvml's mock machines
// (pkg/agent/nvmlmock), publishing the node's gpusched.io/gpu-devices
// annotation through the agent's own publisher against a real API server,
// and the agent's NRI plugin connected over a unix socket to NRI's runtime
// side (the adaptation containerd and CRI-O embed). Creating a pod's
// containers through that runtime gives exactly what a real node would give
// them, so the playground and the end-to-end tests follow a pod from the
// scheduler's decision to its containers' GPUs without a GPU or a container
// runtime.
package simnode

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/containerd/nri/pkg/api"
	rspec "github.com/opencontainers/runtime-spec/specs-go"
	v1 "k8s.io/api/core/v1"

	"github.com/gpusched/gpusched/pkg/agent/deviceplugin"
	"github.com/gpusched/gpusched/pkg/agent/discovery"
	agentnri "github.com/gpusched/gpusched/pkg/agent/nri"
	"github.com/gpusched/gpusched/pkg/agent/nvmlmock"
	"github.com/gpusched/gpusched/pkg/gpu"
)

// Config is one simulated node.
type Config struct {
	// Name is the Node's name; the Node must exist.
	Name string
	// Machine is the node's GPUs.
	Machine *nvmlmock.Machine
	// Nodes is the agent's client for Nodes (clientset.CoreV1().Nodes()).
	Nodes discovery.NodeClient
	// Dir holds the node's NRI socket; it must be short enough for a unix
	// socket path (about 100 bytes).
	Dir string
	// Mode is how containers get their GPUs; agentnri.ModeEnv when empty.
	Mode agentnri.Mode
	// Interval between the agent's rediscoveries; 30s when 0.
	Interval time.Duration
}

// Node is a simulated node's agent and container runtime.
type Node struct {
	Name    string
	Machine *nvmlmock.Machine
	// Store holds the agent's current view of the node's GPUs.
	Store   *discovery.Store
	Plugin  *agentnri.Plugin
	Runtime *Runtime

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Start discovers the node's GPUs and publishes them on its Node (it
// returns once the annotation is written), starts the node's NRI runtime and
// connects the agent's NRI plugin to it (it returns once the plugin is
// registered and synchronized), and keeps the agent's publisher running
// until Stop. The agent's goroutines do not end with ctx: call Stop.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	if cfg.Mode == "" {
		cfg.Mode = agentnri.ModeEnv
	}
	if ret := cfg.Machine.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("node %s: NVML init: %v", cfg.Name, ret)
	}
	n := &Node{Name: cfg.Name, Machine: cfg.Machine, Store: &discovery.Store{}}
	publisher := &discovery.Publisher{
		Lib: cfg.Machine, Nodes: cfg.Nodes, NodeName: cfg.Name, Store: n.Store,
		Health: discovery.NewHealth(), Interval: cfg.Interval,
	}
	if _, err := publisher.Sync(ctx); err != nil {
		return nil, fmt.Errorf("node %s: publishing its GPUs: %w", cfg.Name, err)
	}
	plugin, err := agentnri.New(agentnri.Config{NodeName: cfg.Name, Mode: cfg.Mode}, n.Store, nil)
	if err != nil {
		return nil, err
	}
	n.Plugin = plugin
	if n.Runtime, err = StartRuntime(cfg.Dir); err != nil {
		return nil, fmt.Errorf("node %s: %w", cfg.Name, err)
	}

	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	n.cancel = cancel
	n.wg.Add(2)
	go func() { defer n.wg.Done(); _ = publisher.Run(runCtx) }()
	go func() { defer n.wg.Done(); _ = plugin.Run(runCtx, n.Runtime.Socket(), 50*time.Millisecond) }()

	deadline := time.Now().Add(10 * time.Second)
	for !plugin.Ready() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			n.Stop()
			return nil, fmt.Errorf("node %s: the agent's NRI plugin did not register with the runtime within 10s", cfg.Name)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return n, nil
}

// Stop stops the agent, then the runtime.
func (n *Node) Stop() {
	n.cancel()
	n.wg.Wait()
	n.Runtime.Stop()
}

// Container is one container created through the node's runtime.
type Container struct {
	Name string
	// Adjust is what the plugins (the agent) changed.
	Adjust *api.ContainerAdjustment
	// Spec is the OCI spec the runtime ends up with: the image's and the
	// container's environment, devices and mounts, with Adjust applied.
	Spec *rspec.Spec
	// CDIDevices are the CDI devices the runtime injects into Spec.
	CDIDevices []string
}

// CreatePod creates the pod's containers, init containers first, through
// the node's NRI runtime, as the kubelet and the runtime would: the sandbox
// carries the pod's labels and annotations, each container the environment
// of a CUDA base image (NVIDIA_VISIBLE_DEVICES=all) followed by its spec's
// (literal values; a variable set in both is there twice, as containerd
// builds it) and, for a container that requests nvidia.com/gpu, the
// variable the agent's device plugin sets at Allocate. The adjustment is
// applied to that spec as the runtime applies it. It stops at the first
// container the runtime refuses and returns that error.
func (n *Node) CreatePod(ctx context.Context, pod *v1.Pod) ([]Container, error) {
	sandbox := sandboxOf(pod)
	specs := append(append([]v1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...)
	out := make([]Container, 0, len(specs))
	for _, spec := range specs {
		// The runtime hands NRI the spec it built; the adjustment is applied
		// to that spec.
		final := initialSpec(&api.Container{Env: containerEnv(spec)})
		ctr := &api.Container{
			Id:   string(pod.UID) + "-" + spec.Name,
			Name: spec.Name,
			Env:  slices.Clone(final.Process.Env),
		}
		adj, err := n.Runtime.CreateContainer(ctx, sandbox, ctr)
		if err != nil {
			return out, fmt.Errorf("creating container %s of pod %s/%s on node %s: %w", spec.Name, pod.Namespace, pod.Name, n.Name, err)
		}
		cdi, err := applyAdjustment(final, adj)
		if err != nil {
			return out, fmt.Errorf("container %s of pod %s/%s on node %s: %w", spec.Name, pod.Namespace, pod.Name, n.Name, err)
		}
		out = append(out, Container{Name: spec.Name, Adjust: adj, Spec: final, CDIDevices: cdi})
	}
	return out, nil
}

// StopPod stops the pod's sandbox, as the kubelet does once the pod has
// ended or is deleted: its containers no longer hold GPUs.
func (n *Node) StopPod(ctx context.Context, pod *v1.Pod) error {
	return n.Runtime.StopPodSandbox(ctx, sandboxOf(pod))
}

// sandboxOf is the pod sandbox the kubelet asks the runtime for: the pod's
// name, UID, labels and annotations.
func sandboxOf(pod *v1.Pod) *api.PodSandbox {
	return &api.PodSandbox{
		Id:          "sandbox-" + string(pod.UID),
		Name:        pod.Name,
		Namespace:   pod.Namespace,
		Uid:         string(pod.UID),
		Labels:      pod.Labels,
		Annotations: pod.Annotations,
	}
}

// containerEnv is the environment the kubelet asks the runtime for: the
// spec's literal values and the agent's device plugins' variables.
func containerEnv(spec v1.Container) []string {
	var env []string
	for _, e := range spec.Env {
		if e.ValueFrom == nil {
			env = append(env, e.Name+"="+e.Value)
		}
	}
	if q, ok := spec.Resources.Limits[gpu.ResourceGPU]; ok && q.Value() > 0 {
		env = append(env, deviceplugin.EnvGPUs+"="+strconv.FormatInt(q.Value(), 10))
	}
	if q, ok := spec.Resources.Limits[gpu.ResourceMilli]; ok && q.Value() > 0 {
		env = append(env, deviceplugin.EnvMilli+"="+strconv.FormatInt(q.Value(), 10))
	}
	return env
}
