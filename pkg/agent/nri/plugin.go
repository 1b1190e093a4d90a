// Package nri is the node agent's NRI plugin: at CreateContainer it gives
// each container exactly the GPUs of its pod's gpusched.io/gpu-assigned
// annotation, read from the pod sandbox (no API call on this path), and
// refuses a GPU container whose assignment is missing, malformed, names
// another node or a GPU this node does not have. See Decide for the rules.
package nri

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"k8s.io/klog/v2"

	"github.com/gpusched/gpusched/pkg/agent/discovery"
	"github.com/gpusched/gpusched/pkg/agent/metrics"
)

// PluginName and PluginIndex register the plugin with the runtime; the index
// orders plugins (lower runs first). NVIDIA's own NRI plugins, if any, are
// expected to run before the agent, whose NVIDIA_VISIBLE_DEVICES wins.
const (
	PluginName  = "gpusched"
	PluginIndex = "90"
)

// Record is the agent's view of one container it knows.
type Record struct {
	ID  string
	Pod string // namespace/name
	// UUIDs are the GPUs the container was (or, at Synchronize, would have
	// been) given.
	UUIDs []string
	// Unverified: found at Synchronize with a GPU environment that differs
	// from what the agent gives (created while the agent was not running).
	Unverified bool
}

// Plugin is the NRI plugin. Its handlers are safe for concurrent use.
type Plugin struct {
	cfg     Config
	store   *discovery.Store
	metrics *metrics.Metrics

	// ready: registered with the runtime and synchronized.
	ready atomic.Bool

	mu         sync.Mutex
	containers map[string]Record
}

// Ready reports whether the plugin is registered with the runtime and has
// synchronized (for the agent's readiness probe).
func (p *Plugin) Ready() bool { return p.ready.Load() }

// New returns a plugin reading the node's GPUs from store. m may be nil.
func New(cfg Config, store *discovery.Store, m *metrics.Metrics) (*Plugin, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("NRI plugin: %w", err)
	}
	if store == nil {
		return nil, errors.New("NRI plugin: no GPU inventory store")
	}
	return &Plugin{cfg: cfg, store: store, metrics: m, containers: map[string]Record{}}, nil
}

// Run connects to the runtime's NRI socket and serves until ctx is done,
// reconnecting (after a pause of retry) when the runtime restarts or is not
// up yet. The plugin asks the runtime to fail a request it cannot answer in
// time rather than create the container without it. opts are passed to the
// NRI stub after the plugin's own.
func (p *Plugin) Run(ctx context.Context, socket string, retry time.Duration, opts ...stub.Option) error {
	logger := klog.FromContext(ctx)
	s, err := stub.New(p, append([]stub.Option{
		stub.WithPluginName(PluginName), stub.WithPluginIdx(PluginIndex), stub.WithSocketPath(socket),
		stub.WithFailurePolicy(&api.FailurePolicy{FailRequest: true}),
		stub.WithOnClose(func() { p.ready.Store(false) })}, opts...)...)
	if err != nil {
		return fmt.Errorf("NRI plugin: %w", err)
	}
	for ctx.Err() == nil {
		err := s.Run(ctx)
		if ctx.Err() != nil {
			break
		}
		logger.Error(err, "NRI connection ended; reconnecting", "socket", socket, "after", retry)
		select {
		case <-ctx.Done():
		case <-time.After(retry):
		}
	}
	return nil
}

// Configure logs the runtime and subscribes to every event the plugin
// handles.
func (p *Plugin) Configure(ctx context.Context, _, runtime, version string) (api.EventMask, error) {
	klog.FromContext(ctx).Info("NRI plugin registered", "runtime", runtime, "version", version, "node", p.cfg.NodeName, "mode", p.cfg.Mode)
	return 0, nil
}

// Synchronize rebuilds the view of the containers that exist (after an agent
// or runtime restart). A container whose GPU environment differs from what
// the agent would give it now was created without the agent; it is marked
// Unverified, logged and counted, and left running: NRI cannot change a
// running container's devices.
func (p *Plugin) Synchronize(ctx context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	logger := klog.FromContext(ctx)
	byID := make(map[string]*api.PodSandbox, len(pods))
	for _, pod := range pods {
		byID[pod.GetId()] = pod
	}
	snap := p.store.Current()
	view := make(map[string]Record, len(ctrs))
	unverified := 0
	for _, ctr := range ctrs {
		if ctr.GetState() == api.ContainerState_CONTAINER_STOPPED {
			continue
		}
		pod, ok := byID[ctr.GetPodSandboxId()]
		if !ok {
			continue
		}
		r := Record{ID: ctr.GetId(), Pod: pod.GetNamespace() + "/" + pod.GetName()}
		d, err := Decide(&p.cfg, snap, pod, ctr)
		switch {
		case d.Exempt:
			continue
		case err != nil:
			r.Unverified = true
		default:
			r.UUIDs = d.UUIDs
			r.Unverified = !matches(d.Adjust, ctr)
		}
		if r.Unverified {
			unverified++
			logger.Info("running container's GPUs were not set by the agent", "pod", r.Pod, "container", ctr.GetName(), "problem", err)
		}
		view[r.ID] = r
	}
	p.mu.Lock()
	p.containers = view
	p.mu.Unlock()
	p.metrics.SetUnverified(unverified)
	p.ready.Store(true)
	logger.Info("NRI synchronized", "containers", len(view), "unverified", unverified)
	return nil, nil
}

// matches reports whether a running container already carries the
// environment and CDI devices of adj.
func matches(adj *api.ContainerAdjustment, ctr *api.Container) bool {
	for _, kv := range adj.GetEnv() {
		if !slices.Contains(ctr.GetEnv(), kv.GetKey()+"="+kv.GetValue()) {
			return false
		}
	}
	for _, c := range adj.GetCDIDevices() {
		if !slices.ContainsFunc(ctr.GetCDIDevices(), func(x *api.CDIDevice) bool { return x.GetName() == c.GetName() }) {
			return false
		}
	}
	return true
}

// CreateContainer gives the container its pod's GPUs (see Decide), or
// refuses it with a *RejectError.
func (p *Plugin) CreateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	d, err := Decide(&p.cfg, p.store.Current(), pod, ctr)
	if err != nil {
		var rej *RejectError
		reason := "internal"
		if errors.As(err, &rej) {
			reason = rej.Reason
		}
		p.metrics.Rejected(reason)
		klog.FromContext(ctx).Info("container creation refused", "container", ctr.GetName(), "err", err)
		return nil, nil, err
	}
	switch {
	case d.Exempt:
		p.metrics.ContainerHandled(metrics.OutcomeExempt)
		return nil, nil, nil
	case d.GPUPod:
		p.metrics.ContainerHandled(metrics.OutcomeGPUs)
	default:
		p.metrics.ContainerHandled(metrics.OutcomeNoGPUs)
	}
	p.mu.Lock()
	p.containers[ctr.GetId()] = Record{ID: ctr.GetId(), Pod: pod.GetNamespace() + "/" + pod.GetName(), UUIDs: d.UUIDs}
	p.mu.Unlock()
	return d.Adjust, nil, nil
}

// StopContainer forgets a stopped container.
func (p *Plugin) StopContainer(_ context.Context, _ *api.PodSandbox, ctr *api.Container) ([]*api.ContainerUpdate, error) {
	p.forget(ctr.GetId())
	return nil, nil
}

// RemoveContainer forgets a removed container.
func (p *Plugin) RemoveContainer(_ context.Context, _ *api.PodSandbox, ctr *api.Container) error {
	p.forget(ctr.GetId())
	return nil
}

func (p *Plugin) forget(id string) {
	p.mu.Lock()
	delete(p.containers, id)
	p.mu.Unlock()
}

// Containers returns the plugin's view of the node's containers, by ID.
func (p *Plugin) Containers() []Record {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Record, 0, len(p.containers))
	for _, r := range p.containers {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b Record) int { return strings.Compare(a.ID, b.ID) })
	return out
}
