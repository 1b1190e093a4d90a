// Package nri is the node agent's NRI plugin: at CreateContainer it gives
// each container exactly the GPUs of its pod's gpusched.io/gpu-assigned
// annotation, read from the pod sandbox (no API call on this path), and
// refuses a GPU container whose assignment is missing, malformed, names
// another node or a GPU this node does not have, or takes a GPU that another
// live pod holds. See Decide for the rules.
//
// The plugin keeps two connections to the runtime, because NRI's failure
// policy is per connection:
//   - the enforcer ("gpusched", index 90) handles CreateContainer only, and
//     asks the runtime to fail the request when it cannot answer (and to keep
//     it connected after a timeout): no container starts without its GPUs
//     settled;
//   - the observer ("gpusched-observer", index 91) follows the ends of
//     containers and pod sandboxes to keep the view of live containers that
//     exclusivity is checked against, with the default policy: a stuck
//     observer never blocks a stop or removal; it is dropped, reconnects and
//     learns the live containers again at Synchronize.
package nri

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"k8s.io/klog/v2"

	"github.com/gpusched/gpusched/pkg/agent/discovery"
	"github.com/gpusched/gpusched/pkg/agent/metrics"
	"github.com/gpusched/gpusched/pkg/gpu"
)

// PluginName and PluginIndex register the enforcing connection with the
// runtime (the name to list in the runtime's required_plugins); the index
// orders plugins (lower runs first). NVIDIA's own NRI plugins, if any, are
// expected to run before the agent, whose NVIDIA_VISIBLE_DEVICES wins.
// ObserverName and ObserverIndex register the observing connection.
const (
	PluginName    = "gpusched"
	PluginIndex   = "90"
	ObserverName  = "gpusched-observer"
	ObserverIndex = "91"
)

// Record is the agent's view of one container it knows. A container holds
// its GPUs until it is removed or its pod sandbox stops: a stopped
// container of a running pod (a crash loop, an init container) keeps them
// for its next start.
type Record struct {
	ID  string
	Pod string // namespace/name
	// PodUID tells the containers of one pod from those of another; Sandbox
	// is the pod sandbox's ID.
	PodUID, Sandbox string
	// UUIDs are the GPUs the container was (or, at Synchronize, would have
	// been) given; Milli and MemoryMiB are its pod's share of each (1000
	// and 0 for whole GPUs).
	UUIDs     []string
	Milli     int64
	MemoryMiB int64
	// Unverified: found at Synchronize with a GPU environment that differs
	// from what the agent gives (created while the agent was not running).
	// It holds, whole, every GPU its environment and CDI devices reach.
	Unverified bool
	// Pending: found at Synchronize before the node's GPUs were known; its
	// GPUs are worked out once they are (see resolvePending).
	Pending bool

	pod *api.PodSandbox
	ctr *api.Container
	// unconfirmedSince: recorded at CreateContainer and not yet confirmed
	// by PostCreateContainer (zero once confirmed, and for records from
	// Synchronize).
	unconfirmedSince time.Time
}

// unconfirmedHold is how long a container recorded at CreateContainer holds
// its GPUs without the runtime confirming that it was created: a creation
// the runtime failed after the agent answered (its own timeout, a later
// error) is never confirmed, and must not hold GPUs for long.
const unconfirmedHold = 10 * time.Second

// Plugin is the NRI plugin. Its handlers are safe for concurrent use.
type Plugin struct {
	cfg     Config
	store   *discovery.Store
	metrics *metrics.Metrics

	// ready: the enforcer is registered with the runtime and synchronized.
	ready atomic.Bool
	// observing: the observer is registered and synchronized.
	observing atomic.Bool

	mu         sync.Mutex
	containers map[string]Record
	// byGPU indexes containers by the GPU UUIDs they hold and their pod's
	// UID; pending counts the Pending ones. Both change only through put
	// and drop.
	byGPU   map[string]map[string]map[string]bool
	pending int

	// now and unconfirmedHold, replaceable in tests.
	now             func() time.Time
	unconfirmedHold time.Duration
}

// put records r (under p.mu), replacing any record of the same container.
func (p *Plugin) put(r Record) {
	p.drop(r.ID)
	p.containers[r.ID] = r
	for _, u := range r.UUIDs {
		if p.byGPU[u] == nil {
			p.byGPU[u] = map[string]map[string]bool{}
		}
		if p.byGPU[u][r.PodUID] == nil {
			p.byGPU[u][r.PodUID] = map[string]bool{}
		}
		p.byGPU[u][r.PodUID][r.ID] = true
	}
	if r.Pending {
		p.pending++
	}
}

// drop forgets the container id (under p.mu).
func (p *Plugin) drop(id string) {
	r, ok := p.containers[id]
	if !ok {
		return
	}
	delete(p.containers, id)
	for _, u := range r.UUIDs {
		delete(p.byGPU[u][r.PodUID], id)
		if len(p.byGPU[u][r.PodUID]) == 0 {
			delete(p.byGPU[u], r.PodUID)
		}
		if len(p.byGPU[u]) == 0 {
			delete(p.byGPU, u)
		}
	}
	if r.Pending {
		p.pending--
	}
}

// liveHolder returns a record among the containers ids of one pod that
// still holds its GPUs, dropping those whose creation was never confirmed
// within the hold (the runtime failed them after the agent answered).
func (p *Plugin) liveHolder(ids map[string]bool) (Record, bool) {
	for id := range ids {
		r := p.containers[id]
		if !r.unconfirmedSince.IsZero() && p.now().Sub(r.unconfirmedSince) > p.hold() {
			p.drop(id)
			continue
		}
		return r, true
	}
	return Record{}, false
}

func (p *Plugin) hold() time.Duration {
	if p.unconfirmedHold > 0 {
		return p.unconfirmedHold
	}
	return unconfirmedHold
}

// Ready reports whether the enforcing connection is registered with the
// runtime and has synchronized (for the agent's readiness probe).
func (p *Plugin) Ready() bool { return p.ready.Load() }

// Observing reports whether the observing connection is registered and has
// synchronized, so that the view of live containers is current.
func (p *Plugin) Observing() bool { return p.observing.Load() }

// New returns a plugin reading the node's GPUs from store. m may be nil.
func New(cfg Config, store *discovery.Store, m *metrics.Metrics) (*Plugin, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("NRI plugin: %w", err)
	}
	if store == nil {
		return nil, errors.New("NRI plugin: no GPU inventory store")
	}
	return &Plugin{cfg: cfg, store: store, metrics: m, containers: map[string]Record{}, byGPU: map[string]map[string]map[string]bool{}, now: time.Now}, nil
}

// Run connects both connections to the runtime's NRI socket and serves
// until ctx is done, reconnecting each (after a pause of retry) when the
// runtime restarts or is not up yet. It does not wait for the node's GPUs:
// until they are known, GPU containers are refused with a clear reason and
// the others are confined as usual. opts are passed to both NRI stubs after
// the plugin's own.
func (p *Plugin) Run(ctx context.Context, socket string, retry time.Duration, opts ...stub.Option) error {
	enf, err := stub.New(enforcer{p}, append([]stub.Option{
		stub.WithPluginName(PluginName), stub.WithPluginIdx(PluginIndex), stub.WithSocketPath(socket),
		stub.WithFailurePolicy(&api.FailurePolicy{FailRequest: true, KeepConnected: true}),
		stub.WithOnClose(func() { p.ready.Store(false) })}, opts...)...)
	if err != nil {
		return fmt.Errorf("NRI plugin: %w", err)
	}
	obs, err := stub.New(observer{p}, append([]stub.Option{
		stub.WithPluginName(ObserverName), stub.WithPluginIdx(ObserverIndex), stub.WithSocketPath(socket),
		stub.WithOnClose(func() { p.observing.Store(false) })}, opts...)...)
	if err != nil {
		return fmt.Errorf("NRI plugin: %w", err)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); serve(ctx, enf, PluginName, socket, retry) }()
	go func() { defer wg.Done(); serve(ctx, obs, ObserverName, socket, retry) }()
	wg.Wait()
	return nil
}

// serve runs one NRI connection until ctx is done, reconnecting after retry.
func serve(ctx context.Context, s stub.Stub, name, socket string, retry time.Duration) {
	logger := klog.FromContext(ctx)
	for ctx.Err() == nil {
		err := s.Run(ctx)
		if ctx.Err() != nil {
			return
		}
		logger.Error(err, "NRI connection ended; reconnecting", "plugin", name, "socket", socket, "after", retry)
		select {
		case <-ctx.Done():
		case <-time.After(retry):
		}
	}
}

// enforcer is the connection that answers CreateContainer.
type enforcer struct{ p *Plugin }

// Configure subscribes to CreateContainer alone: the one request the agent
// must be able to fail.
func (e enforcer) Configure(ctx context.Context, _, runtime, version string) (api.EventMask, error) {
	klog.FromContext(ctx).Info("NRI plugin registered", "plugin", PluginName, "runtime", runtime, "version", version,
		"node", e.p.cfg.NodeName, "mode", e.p.cfg.Mode)
	return api.MustParseEventMask("CreateContainer"), nil
}

func (e enforcer) Synchronize(ctx context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	e.p.synchronize(ctx, pods, ctrs)
	e.p.ready.Store(true)
	return nil, nil
}

func (e enforcer) CreateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	adj, err := e.p.CreateContainer(ctx, pod, ctr)
	return adj, nil, err
}

// observer is the connection that follows containers' ends.
type observer struct{ p *Plugin }

// Configure subscribes to the creation of containers and the ends of
// containers and pod sandboxes.
func (o observer) Configure(ctx context.Context, _, runtime, version string) (api.EventMask, error) {
	klog.FromContext(ctx).V(2).Info("NRI plugin registered", "plugin", ObserverName, "runtime", runtime, "version", version)
	return api.MustParseEventMask("PostCreateContainer,RemoveContainer,StopPodSandbox,RemovePodSandbox"), nil
}

// PostCreateContainer confirms that a container the agent answered for was
// created.
func (o observer) PostCreateContainer(_ context.Context, _ *api.PodSandbox, ctr *api.Container) error {
	o.p.mu.Lock()
	defer o.p.mu.Unlock()
	if r, ok := o.p.containers[ctr.GetId()]; ok {
		r.unconfirmedSince = time.Time{}
		o.p.containers[ctr.GetId()] = r // the same GPUs: no index change
	}
	return nil
}

func (o observer) Synchronize(ctx context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	o.p.synchronize(ctx, pods, ctrs)
	o.p.observing.Store(true)
	return nil, nil
}

// RemoveContainer forgets a removed container.
func (o observer) RemoveContainer(_ context.Context, _ *api.PodSandbox, ctr *api.Container) error {
	o.p.forget(func(r Record) bool { return r.ID == ctr.GetId() })
	return nil
}

// StopPodSandbox forgets the containers of a stopped pod: its GPUs are free.
func (o observer) StopPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	o.p.forget(func(r Record) bool { return r.Sandbox == pod.GetId() })
	return nil
}

// RemovePodSandbox forgets the containers of a removed pod.
func (o observer) RemovePodSandbox(_ context.Context, pod *api.PodSandbox) error {
	o.p.forget(func(r Record) bool { return r.Sandbox == pod.GetId() })
	return nil
}

// synchronize rebuilds the view of the containers that exist (after an
// agent or runtime restart). A container whose GPU environment differs from
// what the agent would give it now was created without the agent; it is
// marked Unverified, logged and counted, and left running: NRI cannot
// change a running container's devices.
func (p *Plugin) synchronize(ctx context.Context, pods []*api.PodSandbox, ctrs []*api.Container) {
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
		if snap == nil {
			view[ctr.GetId()] = Record{ID: ctr.GetId(), Pod: pod.GetNamespace() + "/" + pod.GetName(), PodUID: pod.GetUid(),
				Sandbox: pod.GetId(), Pending: true, pod: pod, ctr: ctr}
			continue
		}
		r, exempt := verify(&p.cfg, snap, pod, ctr)
		if exempt {
			continue
		}
		if r.Unverified {
			unverified++
			logger.Info("running container's GPUs were not set by the agent; it holds every GPU it can reach", "pod", r.Pod,
				"container", ctr.GetName(), "gpus", r.UUIDs)
		}
		view[r.ID] = r
	}
	p.mu.Lock()
	p.containers, p.byGPU, p.pending = map[string]Record{}, map[string]map[string]map[string]bool{}, 0
	for _, r := range view {
		p.put(r)
	}
	p.mu.Unlock()
	p.metrics.SetUnverified(unverified)
	logger.Info("NRI synchronized", "containers", len(view), "unverified", unverified)
}

// record is the view of a container given d.
func record(pod *api.PodSandbox, ctr *api.Container, d Decision) Record {
	r := Record{ID: ctr.GetId(), Pod: pod.GetNamespace() + "/" + pod.GetName(), PodUID: pod.GetUid(), Sandbox: pod.GetId(), UUIDs: d.UUIDs}
	if len(d.UUIDs) > 0 {
		r.Milli, r.MemoryMiB = d.Assignment.Milli, d.Assignment.MemoryMiB
	}
	return r
}

// verify is the view of a running container found at Synchronize: what the
// agent would give it when it already carries that, else (Unverified) every
// GPU it reaches, whole. exempt: an unrestricted pod, not in the view.
func verify(cfg *Config, snap *discovery.Snapshot, pod *api.PodSandbox, ctr *api.Container) (r Record, exempt bool) {
	d, err := Decide(cfg, snap, pod, ctr)
	if err == nil && d.Exempt {
		return Record{}, true
	}
	r = record(pod, ctr, d)
	if err == nil && matches(d.Adjust, ctr) {
		return r, false
	}
	r.Unverified = true
	r.UUIDs, r.Milli, r.MemoryMiB = reached(snap, ctr), gpu.MilliPerGPU, 0
	return r, false
}

// reached lists the GPUs of snap a running container can use by its
// environment and CDI devices: NVIDIA_VISIBLE_DEVICES (its last value, as
// the NVIDIA runtime reads it; "all", UUIDs or indices) and CDI devices
// nvidia.com/gpu=<UUID>.
func reached(snap *discovery.Snapshot, ctr *api.Container) []string {
	var out []string
	add := func(uuid string) {
		if !slices.Contains(out, uuid) {
			out = append(out, uuid)
		}
	}
	visible := ""
	for _, kv := range ctr.GetEnv() {
		if k, v, _ := strings.Cut(kv, "="); k == EnvVisibleDevices {
			visible = v
		}
	}
	for _, name := range strings.Split(visible, ",") {
		name = strings.TrimSpace(name)
		switch {
		case name == "all":
			for _, d := range snap.Devices {
				add(d.UUID)
			}
		case name == "" || name == "void" || name == "none":
		default:
			if d, ok := snap.ByUUID(name); ok {
				add(d.UUID)
			} else if i, err := strconv.Atoi(name); err == nil {
				if d, ok := snap.ByIndex(i); ok {
					add(d.UUID)
				}
			}
		}
	}
	for _, c := range ctr.GetCDIDevices() {
		if uuid, ok := strings.CutPrefix(c.GetName(), cdiKind+"="); ok {
			if d, ok := snap.ByUUID(uuid); ok {
				add(d.UUID)
			}
		}
	}
	return out
}

// resolvePending works out, under p.mu, the GPUs of the containers found
// at Synchronize before the node's GPUs were known.
func (p *Plugin) resolvePending(snap *discovery.Snapshot) {
	if snap == nil || p.pending == 0 {
		return
	}
	for id, r := range p.containers {
		if !r.Pending {
			continue
		}
		resolved, exempt := verify(&p.cfg, snap, r.pod, r.ctr)
		if exempt {
			p.drop(id)
			continue
		}
		p.put(resolved)
	}
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
// refuses it with a *RejectError; a container whose GPUs another live pod
// holds is refused too (see exclusive).
func (p *Plugin) CreateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, error) {
	d, err := Decide(&p.cfg, p.store.Current(), pod, ctr)
	if err == nil && !d.Exempt {
		p.mu.Lock()
		switch {
		case ctx.Err() != nil:
			// The runtime gave up on this request (its timeout) and failed
			// the creation: the container will not exist, so it must not
			// hold GPUs in the view.
			err = fmt.Errorf("gpusched: pod %s/%s: answered after the runtime's deadline: %w", pod.GetNamespace(), pod.GetName(), ctx.Err())
		default:
			if err = p.exclusive(pod, d); err == nil {
				r := record(pod, ctr, d)
				r.unconfirmedSince = p.now()
				p.put(r)
			}
		}
		p.mu.Unlock()
	}
	if err != nil {
		var rej *RejectError
		reason := "internal"
		if errors.As(err, &rej) {
			reason = rej.Reason
		}
		p.metrics.Rejected(reason)
		klog.FromContext(ctx).Info("container creation refused", "container", ctr.GetName(), "err", err)
		return nil, err
	}
	switch {
	case d.Exempt:
		p.metrics.ContainerHandled(metrics.OutcomeExempt)
		return nil, nil
	case d.GPUPod:
		p.metrics.ContainerHandled(metrics.OutcomeGPUs)
	default:
		p.metrics.ContainerHandled(metrics.OutcomeNoGPUs)
	}
	return d.Adjust, nil
}

// exclusive checks, under p.mu, that the GPUs of d are free for pod on the
// node itself: no other live pod's container holds one of them whole, and
// the shares on each sum to at most 1000 milli and the GPU's memory. It is
// the node's own check behind the scheduler's ledger, for what the ledger
// cannot see: a GPU renumbered under running pods, another scheduler's or
// device plugin's pod, an assignment left behind by a failed bind, or a
// late bind of a former leader.
func (p *Plugin) exclusive(pod *api.PodSandbox, d Decision) error {
	if len(d.UUIDs) == 0 {
		return nil
	}
	podName := pod.GetNamespace() + "/" + pod.GetName()
	snap := p.store.Current()
	p.resolvePending(snap)
	for _, uuid := range d.UUIDs {
		milli, memory := d.Assignment.Milli, d.Assignment.MemoryMiB
		var holders []string
		for uid, ids := range p.byGPU[uuid] {
			if uid == pod.GetUid() {
				continue
			}
			r, live := p.liveHolder(ids)
			if !live {
				continue
			}
			milli += r.Milli
			memory += r.MemoryMiB
			holders = append(holders, fmt.Sprintf("%s (%d milli, %d MiB)", r.Pod, r.Milli, r.MemoryMiB))
		}
		if len(holders) == 0 {
			continue
		}
		slices.Sort(holders)
		limit := "1000 milli"
		over := milli > gpu.MilliPerGPU
		if dev, ok := snap.ByUUID(uuid); ok && !over && dev.MemoryMiB > 0 && memory > dev.MemoryMiB {
			limit, over = fmt.Sprintf("its %d MiB", dev.MemoryMiB), true
		}
		if over {
			return &RejectError{Pod: podName, Reason: ReasonGPUInUse, Subject: gpu.AnnotationAssigned, Detail: fmt.Sprintf(
				"GPU %s is held by live pods %s: with this pod's %d milli and %d MiB it would pass %s; "+
					"the assignment is stale or was not made by gpusched's ledger", uuid, strings.Join(holders, ", "),
				d.Assignment.Milli, d.Assignment.MemoryMiB, limit)}
		}
	}
	return nil
}

// forget drops the containers that match.
func (p *Plugin) forget(match func(Record) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, r := range p.containers {
		if match(r) {
			p.drop(id)
		}
	}
}

// Containers returns the plugin's view of the node's containers, by ID.
func (p *Plugin) Containers() []Record {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.resolvePending(p.store.Current())
	out := make([]Record, 0, len(p.containers))
	for _, r := range p.containers {
		r.pod, r.ctr, r.unconfirmedSince = nil, nil, time.Time{}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b Record) int { return strings.Compare(a.ID, b.ID) })
	return out
}
