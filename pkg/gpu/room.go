package gpu

import (
	"maps"
	"slices"
	"sync"
	"sync/atomic"
)

// FleetRoom is a Fleet that also knows how much of its GPUs is free, by
// model. PairFit and FragFit then charge a model's pressure only while the
// model's free room runs short of what the model-limited pods still to come
// need of it (sharePrices.pressedBy); with a Fleet alone they charge it
// always. The Ledger is one: it sums the views it holds.
type FleetRoom interface {
	Fleet
	// RoomByModel is the free room by model, or nil when the fleet cannot
	// tell. A fleet returns the same *FreeRoom until the room changes, and
	// never modifies one it returned.
	RoomByModel() *FreeRoom
}

// FreeRoom is the free milli-GPU of a fleet's GPUs by model. Immutable.
type FreeRoom struct {
	byModel map[string]int64
}

// Of is the free milli-GPU of the fleet's GPUs of model; 0 for a nil room.
func (r *FreeRoom) Of(model string) int64 {
	if r == nil {
		return 0
	}
	return r.byModel[model]
}

// RoomOfViews is base's room (nil for none) with the free room of the
// views in add counted and of those in drop taken away: a front end's room
// summed in one pass, for a fleet it builds from views it holds (what-if,
// the simulator's planner, GPUPlacement's DRA nodes).
func RoomOfViews(base *FreeRoom, add, drop []*NodeGPUs) *FreeRoom {
	byModel := map[string]int64{}
	if base != nil {
		maps.Copy(byModel, base.byModel)
	}
	for _, step := range []struct {
		views []*NodeGPUs
		sign  int64
	}{{add, +1}, {drop, -1}} {
		for _, v := range step.views {
			if v == nil || v.Inventory == nil {
				continue
			}
			devices := v.Inventory.Devices
			for i := range min(len(devices), v.Len()) {
				byModel[devices[i].Model] += step.sign * v.FreeMilli(i)
			}
		}
	}
	maps.DeleteFunc(byModel, func(_ string, milli int64) bool { return milli == 0 })
	return &FreeRoom{byModel: byModel}
}

// Equal reports whether r and o count the same room (nil for none).
func (r *FreeRoom) Equal(o *FreeRoom) bool {
	if r == nil || o == nil {
		return r == o
	}
	return maps.Equal(r.byModel, o.byModel)
}

// RoomCount sums the free milli-GPU of node views by model, for a FleetRoom:
// a front end that replaces a node's view tells it the view before and the
// view after (Replace). The Ledger keeps one for the views it holds; what-if
// keeps its own, as it places pods on views the ledger never sees. Safe for
// concurrent use.
type RoomCount struct {
	mu      sync.Mutex
	byModel map[string]int64
	room    atomic.Pointer[FreeRoom]
}

// Replace moves the count from a node's previous view to its next one
// (either nil for none), and publishes a new FreeRoom when that changed it.
// A view whose inventory could not be read counts nothing.
func (c *RoomCount) Replace(prev, next *NodeGPUs) {
	if prev == next {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byModel == nil {
		c.byModel = map[string]int64{}
	}
	var touchedAt [16]string
	touched := touchedAt[:0]
	for _, step := range []struct {
		view *NodeGPUs
		sign int64
	}{{prev, -1}, {next, +1}} {
		if step.view == nil || step.view.Inventory == nil {
			continue
		}
		devices := step.view.Inventory.Devices
		for i := range min(len(devices), step.view.Len()) {
			if free := step.view.FreeMilli(i); free != 0 {
				c.byModel[devices[i].Model] += step.sign * free
				if !slices.Contains(touched, devices[i].Model) {
					touched = append(touched, devices[i].Model)
				}
			}
		}
	}
	last := c.room.Load()
	changed := last == nil
	for _, m := range touched {
		if !changed && last.byModel[m] != c.byModel[m] {
			changed = true
		}
		if c.byModel[m] == 0 {
			delete(c.byModel, m)
		}
	}
	if changed {
		c.room.Store(&FreeRoom{byModel: maps.Clone(c.byModel)})
	}
}

// Add adds a room (nil for none) to the count.
func (c *RoomCount) Add(r *FreeRoom) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byModel == nil {
		c.byModel = map[string]int64{}
	}
	if r != nil {
		for m, milli := range r.byModel {
			c.byModel[m] += milli
		}
	}
	c.room.Store(&FreeRoom{byModel: maps.Clone(c.byModel)})
}

// RoomByModel is the free room last published; nil before the first view.
func (c *RoomCount) RoomByModel() *FreeRoom { return c.room.Load() }
