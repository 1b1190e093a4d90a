package discovery

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// NodeClient is the part of client-go's NodeInterface the publisher uses
// (kubernetes.Interface.CoreV1().Nodes() satisfies it).
type NodeClient interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*v1.Node, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*v1.Node, error)
}

// Error stages reported to Publisher.OnError.
const (
	StageNVML      = "nvml"      // NVML could not be asked at all
	StageGPU       = "gpu"       // one GPU could not be read
	StageInventory = "inventory" // the devices do not make a valid inventory
	StageNode      = "node"      // reading the Node failed
	StagePatch     = "patch"     // patching the Node failed
	StageXID       = "xid"       // the XID watcher stopped with an error
)

// Publisher keeps the node's gpusched.io/gpu-devices annotation equal to what
// NVML reports, with health marks applied. It rediscovers every Interval and
// at once after a new health mark, patches the Node (a JSON merge patch of
// that one annotation, on its own Node only) whenever the value on the Node
// differs from the discovered one (including after someone else edited or
// removed it), and runs an XIDWatcher over the current GPUs, restarting it
// when the set of GPUs or MIG devices changes.
type Publisher struct {
	Lib      nvml.Interface
	Nodes    NodeClient
	NodeName string
	Store    *Store
	Health   *Health
	// Interval between rediscoveries; 30s when 0.
	Interval time.Duration
	// CriticalXIDs for the watcher (DefaultCriticalXIDs when nil).
	CriticalXIDs []uint64
	// SysfsRoot, see Options.
	SysfsRoot string
	// OnError, when set, counts errors by stage (Stage*).
	OnError func(stage string)
	// OnXID, when set, counts XID events (see XIDWatcher.OnXID).
	OnXID func(xid uint64, critical bool)
	// Now stamps health marks; time.Now when nil.
	Now func() time.Time

	// lost keeps the GPUs NVML stopped reporting (see Lost).
	lost Lost
}

// Run publishes until ctx is done, then stops the XID watcher and returns
// nil. Errors of one round are logged and counted; the next round retries.
func (p *Publisher) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	interval := p.Interval
	if interval <= 0 {
		interval = 30 * time.Second
	}
	var (
		wg          sync.WaitGroup
		stopWatcher = func() {}
		layout      = "\x00" // no watcher yet
	)
	round := func() {
		snap, err := p.Sync(ctx)
		if err != nil {
			logger.Error(err, "GPU inventory round failed")
		}
		if snap == nil || snap.Machine == nil || layoutOf(snap.Machine) == layout {
			return
		}
		stopWatcher()
		layout = layoutOf(snap.Machine)
		wctx, cancel := context.WithCancel(ctx)
		stopWatcher = cancel
		w := &XIDWatcher{Lib: p.Lib, Critical: p.CriticalXIDs, Health: p.Health, OnXID: p.OnXID, Now: p.Now}
		wg.Add(1)
		go func(m *Machine) {
			defer wg.Done()
			if err := w.Run(wctx, m); err != nil && wctx.Err() == nil {
				logger.Error(err, "XID watcher stopped; GPU health is not watched until the next change of GPUs")
				p.count(StageXID)
			}
		}(snap.Machine)
	}

	round()
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			stopWatcher()
			wg.Wait()
			return nil
		case <-ticker.C:
			round()
		case <-p.Health.Changed():
			round()
		}
	}
}

// Sync runs one round: read the Node (for its clique label and current
// annotation), discover, store the snapshot, patch the Node when its value
// differs. It returns the new snapshot, or nil when discovery failed as a
// whole (the store then keeps the previous one).
func (p *Publisher) Sync(ctx context.Context) (*Snapshot, error) {
	logger := klog.FromContext(ctx)
	node, err := p.Nodes.Get(ctx, p.NodeName, metav1.GetOptions{})
	if err != nil {
		p.count(StageNode)
		logger.Error(err, "reading the Node failed; publishing without its clique label", "node", p.NodeName)
		node = nil
	}
	opts := Options{SysfsRoot: p.SysfsRoot}
	if node != nil {
		opts.Clique = node.Labels[gpu.LabelClique]
	}
	m, err := Discover(p.Lib, opts)
	if m == nil {
		p.count(StageNVML)
		return nil, err
	}
	if err != nil {
		p.count(StageGPU)
		logger.Error(err, "some GPUs could not be read and are not published")
	}
	snap, err := NewSnapshot(m, p.Health)
	if err == nil {
		now := time.Now
		if p.Now != nil {
			now = p.Now
		}
		snap, err = p.lost.Keep(p.Store.Current(), snap, now())
	}
	if err != nil {
		p.count(StageInventory)
		return nil, fmt.Errorf("GPUs of node %s: %w", p.NodeName, err)
	}
	if cur := p.Store.Current(); cur == nil || cur.Annotation != snap.Annotation || layoutOf(cur.Machine) != layoutOf(m) {
		p.Store.Set(snap)
		logger.Info("GPU inventory changed", "devices", len(snap.Devices), "annotation", snap.Annotation)
	}
	if node != nil && node.Annotations[gpu.AnnotationDevices] == snap.Annotation {
		return snap, nil
	}
	if err := p.patch(ctx, snap.Annotation); err != nil {
		p.count(StagePatch)
		return snap, err
	}
	return snap, nil
}

func (p *Publisher) patch(ctx context.Context, value string) error {
	body, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": map[string]string{gpu.AnnotationDevices: value}},
	})
	if err != nil {
		return err
	}
	if _, err := p.Nodes.Patch(ctx, p.NodeName, types.MergePatchType, body, metav1.PatchOptions{FieldManager: "gpusched-agent"}); err != nil {
		return fmt.Errorf("patching %s on node %s: %w", gpu.AnnotationDevices, p.NodeName, err)
	}
	return nil
}

func (p *Publisher) count(stage string) {
	if p.OnError != nil {
		p.OnError(stage)
	}
}

// layoutOf identifies the set of GPUs and MIG devices of a discovery.
func layoutOf(m *Machine) string {
	if m == nil {
		return ""
	}
	var b strings.Builder
	for _, g := range m.GPUs {
		b.WriteString(g.UUID)
		for _, d := range g.MIG {
			b.WriteByte('/')
			b.WriteString(d.UUID)
		}
		b.WriteByte(';')
	}
	return b.String()
}
