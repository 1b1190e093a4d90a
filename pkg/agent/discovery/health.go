package discovery

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2"
)

// DefaultCriticalXIDs are the XIDs that mark a GPU unhealthy. An XID is
// critical when NVIDIA's XID catalog asks for the GPU to be reset, the node
// rebooted or the board serviced, or when it reports memory that can no
// longer be trusted until a reset; in each case the GPU should take no new
// pods until an operator has acted:
//
//	48  double-bit (uncorrectable) ECC error
//	61  internal micro-controller breakpoint/warning
//	62  internal micro-controller halt
//	63  ECC page retirement or row remapping recorded: the remap only takes
//	    effect after a GPU reset
//	64  ECC page retirement or row remapping failure
//	69  graphics engine class error
//	74  NVLink error
//	79  GPU has fallen off the bus
//	92  high single-bit ECC error rate
//	94  contained ECC error: the affected application was stopped and the
//	    GPU needs a reset at the next opportunity, so it is drained
//	95  uncontained ECC error
//	119 GSP RPC timeout
//	120 GSP error
//
// Application-level XIDs (13 graphics engine exception, 31 GPU memory page
// fault, 43 GPU stopped processing, 45 preemptive cleanup, 68 video
// processor exception) stop one program and leave the GPU usable; NVIDIA's
// device plugin ignores them too, and so does the agent.
var DefaultCriticalXIDs = []uint64{48, 61, 62, 63, 64, 69, 74, 79, 92, 94, 95, 119, 120}

// ParseXIDs reads a comma-separated list of XIDs, e.g. "48,79,95".
func ParseXIDs(s string) ([]uint64, error) {
	var out []uint64
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		n, err := strconv.ParseUint(item, 10, 32)
		if err != nil || n == 0 {
			return nil, fmt.Errorf("critical XID %q: want a positive integer such as 79", item)
		}
		out = append(out, n)
	}
	return out, nil
}

// Health records which devices (by GPU or MIG UUID) are unhealthy and why.
// A mark lasts for the life of the process: NVIDIA's recovery for a critical
// XID is a GPU reset or a reboot, after which the agent starts afresh.
type Health struct {
	mu      sync.Mutex
	marks   map[string]string
	changed chan struct{}
}

// NewHealth returns an empty Health.
func NewHealth() *Health {
	return &Health{marks: map[string]string{}, changed: make(chan struct{}, 1)}
}

// Mark records the devices uuids as unhealthy for reason, all at once (a
// reader never sees some of them marked and not the others); a device
// already marked keeps its first reason. It returns the devices newly marked.
func (h *Health) Mark(reason string, uuids ...string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var added []string
	for _, u := range uuids {
		if _, ok := h.marks[u]; !ok {
			h.marks[u] = reason
			added = append(added, u)
		}
	}
	if len(added) > 0 {
		select {
		case h.changed <- struct{}{}:
		default:
		}
	}
	return added
}

// Reason is why uuid is unhealthy, or "" when it is healthy.
func (h *Health) Reason(uuid string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.marks[uuid]
}

// Changed receives after a new mark (coalesced).
func (h *Health) Changed() <-chan struct{} { return h.changed }

// XIDWatcher marks devices unhealthy on NVML XID events.
type XIDWatcher struct {
	Lib nvml.Interface
	// Critical are the XIDs that mark a device unhealthy (DefaultCriticalXIDs
	// when nil).
	Critical []uint64
	Health   *Health
	// Now stamps the mark ("XID 79 at 2026-11-24T10:02:11Z"); time.Now when nil.
	Now func() time.Time
	// OnXID, when set, is told of every XID event and whether it was critical.
	OnXID func(xid uint64, critical bool)
	// WaitTimeout bounds one nvmlEventSetWait, and so how long Run takes to
	// return after ctx is done; 500ms when 0.
	WaitTimeout time.Duration
}

// Run registers the machine's GPUs for XID events and marks devices until
// ctx is done. A GPU that does not support XID events is logged and skipped.
// It returns ctx's error, or an error when no event set can be created.
//
// An event on a MIG-enabled GPU that names a GPU instance marks that MIG
// device only; any other event marks the GPU and all its MIG devices.
func (w *XIDWatcher) Run(ctx context.Context, m *Machine) error {
	logger := klog.FromContext(ctx)
	set, ret := w.Lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("nvmlEventSetCreate: %v", ret)
	}
	defer set.Free()
	for uuid, why := range registerXIDs(set, m) {
		logger.Info(why+"; its health is not watched", "uuid", uuid)
	}
	timeout := w.WaitTimeout
	if timeout <= 0 {
		timeout = 500 * time.Millisecond
	}
	for ctx.Err() == nil {
		e, ret := set.Wait(uint32(timeout / time.Millisecond))
		switch {
		case ret == nvml.ERROR_TIMEOUT:
			continue
		case ret != nvml.SUCCESS:
			logger.Info("waiting for NVML events failed", "nvml", ret)
			select {
			case <-ctx.Done():
			case <-time.After(timeout):
			}
			continue
		case e.EventType&nvml.EventTypeXidCriticalError == 0:
			continue
		}
		w.handle(ctx, m, e)
	}
	return ctx.Err()
}

// registerXIDs registers every GPU of m for XID events on set and returns,
// for each GPU it could not register, why.
func registerXIDs(set nvml.EventSet, m *Machine) map[string]string {
	unwatched := map[string]string{}
	for _, g := range m.GPUs {
		supported, ret := g.handle.GetSupportedEventTypes()
		if ret != nvml.SUCCESS {
			unwatched[g.UUID] = fmt.Sprintf("asking for the GPU's event types failed (nvml %v)", ret)
			continue
		}
		if supported&nvml.EventTypeXidCriticalError == 0 {
			unwatched[g.UUID] = "GPU does not report XID events"
			continue
		}
		if ret := g.handle.RegisterEvents(nvml.EventTypeXidCriticalError, set); ret != nvml.SUCCESS {
			unwatched[g.UUID] = fmt.Sprintf("registering for XID events failed (nvml %v)", ret)
		}
	}
	return unwatched
}

// XIDSupport registers m's GPUs for XID events as XIDWatcher does, on an
// event set of its own that it frees again, and returns for each GPU whose
// health the agent could not watch why.
func XIDSupport(lib nvml.Interface, m *Machine) (map[string]string, error) {
	set, ret := lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("nvmlEventSetCreate: %v", ret)
	}
	defer set.Free()
	return registerXIDs(set, m), nil
}

func (w *XIDWatcher) handle(ctx context.Context, m *Machine, e nvml.EventData) {
	critical := slices.Contains(w.critical(), e.EventData)
	if w.OnXID != nil {
		w.OnXID(e.EventData, critical)
	}
	uuid := ""
	if e.Device != nil {
		uuid, _ = e.Device.GetUUID()
	}
	logger := klog.FromContext(ctx).WithValues("xid", e.EventData, "uuid", uuid, "gpuInstance", e.GpuInstanceId)
	if !critical {
		logger.Info("XID event does not mark the GPU unhealthy")
		return
	}
	now := time.Now
	if w.Now != nil {
		now = w.Now
	}
	reason := fmt.Sprintf("XID %d at %s", e.EventData, now().UTC().Format(time.RFC3339))
	if added := w.Health.Mark(reason, targets(m, uuid, e.GpuInstanceId)...); len(added) > 0 {
		logger.Info("devices marked unhealthy", "devices", added, "reason", reason)
	}
}

func (w *XIDWatcher) critical() []uint64 {
	if w.Critical == nil {
		return DefaultCriticalXIDs
	}
	return w.Critical
}

// allInstances is NVML's GPU instance id for "not one MIG instance".
const allInstances = 0xFFFFFFFF

// targets are the device UUIDs an event on GPU uuid (every GPU when "")
// in GPU instance gi makes unhealthy.
func targets(m *Machine, uuid string, gi uint32) []string {
	var out []string
	for _, g := range m.GPUs {
		if uuid != "" && g.UUID != uuid {
			continue
		}
		one := g.MIGEnabled && gi != allInstances
		if !one {
			out = append(out, g.UUID)
		}
		for _, d := range g.MIG {
			if !one || uint32(d.GPUInstanceID) == gi {
				out = append(out, d.UUID)
			}
		}
	}
	return out
}
