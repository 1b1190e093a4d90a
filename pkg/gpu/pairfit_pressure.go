package gpu

import (
	"slices"

	packinglp "github.com/gpusched/gpusched/pkg/packing"
)

// lpPressure is, per class of GPUs, the share of the items limited to
// models that would find the class full if every pod that may use any
// model were spread over the classes in proportion to their GPUs, as a
// policy blind to models spreads them. Class c then receives its limited
// items' milli-GPU D_c (each limited kind's spread over the classes it
// may use in proportion to their GPUs) and U × C_c / C of the unlimited
// items' U, C_c being its GPUs' milli-GPU and C all classes'; it is full
// once C_c / (D_c + U × C_c / C) of them came, and the rest of its
// limited items find no room:
//
//	pressure_c = max(0, 1 − C_c / (D_c + U × C_c / C))
//
// 0 for a class with room to spare. PairFit charges it on every
// milli-GPU a pod takes of the class while the class is charged
// (pressedBy; docs/policies.md, PairFit, Models).
//
// reserve_c is D_c's share of all the items' milli-GPU: of the pods still
// to come, the share that class c must take, each limited kind spread
// over the classes it may use in proportion to their GPUs (pressedBy).
func lpPressure(kinds []packinglp.Kind, counts, gpus []int64) (pressure, reserve []float64) {
	need := make([]float64, len(gpus))
	var unlimited, total float64
	for k, kind := range kinds {
		milli := float64(counts[k] * kind.Size)
		total += milli
		if kind.Classes == nil {
			unlimited += milli
			continue
		}
		var allowed int64
		for _, c := range kind.Classes {
			allowed += gpus[c]
		}
		if allowed == 0 {
			continue
		}
		for _, c := range kind.Classes {
			need[c] += milli * float64(gpus[c]) / float64(allowed)
		}
	}
	var capacity float64
	for _, g := range gpus {
		capacity += float64(g * MilliPerGPU)
	}
	pressure, reserve = make([]float64, len(gpus)), make([]float64, len(gpus))
	for c, g := range gpus {
		if g == 0 {
			continue
		}
		room := float64(g * MilliPerGPU)
		pressure[c] = max(0, 1-room/(need[c]+unlimited*room/capacity))
		reserve[c] = need[c] / total
	}
	return pressure, reserve
}

// reserveMargin is how many times the room that the model-limited pods
// still to come need of a class (reserve_c × the fleet's free room) the
// class's free room must hold for its pressure to be lifted. The free room
// counts fragments and GPUs behind used-up CPU that a limited pod cannot
// use, and the pods to come are a sample, not their mean: on the two
// variants the rule was tuned on, 1 lost 1.3 points on the one whose
// limited pods ask for whole GPUs on 8-GPU nodes, 2 to 4 did within 0.15
// points of each other and 3 best on both (docs/policies.md, PairFit,
// Models).
const reserveMargin = 3

// pressedBy is the classes whose pressure the fleet's free room calls for,
// as a bit set: a class c with a pressure is charged while
//
//	F_c < reserveMargin × reserve_c × F
//
// F_c being the free milli-GPU of its GPUs and F the fleet's: while its
// room is short of what the limited pods still to come need of it. Pods of
// any model then stay off a model only while the limited pods need it, not
// for the whole run, and fill it while it has room to spare. It is a
// function of the room alone, so that every front end that sees the same
// cluster charges the same classes (what-if agrees with the scheduler, a
// restarted scheduler with the one before). ok is false when the room
// cannot say (more classes than a bit set holds).
func (s *sharePrices) pressedBy(room *FreeRoom) (pressed uint64, ok bool) {
	classes := s.items.ClassModels
	if len(classes) > 64 || len(s.reserve) != len(classes) {
		return 0, false
	}
	var free [64]float64
	var all float64
	for c, models := range classes {
		for _, m := range models {
			free[c] += float64(room.Of(m))
		}
		all += free[c]
	}
	for c := range classes {
		if s.pressure[c] > 0 && free[c] < reserveMargin*s.reserve[c]*all {
			pressed |= 1 << uint(c)
		}
	}
	return pressed, true
}

// allClasses is the pressed set of prices that charge every pressure: the
// LP's own, where the fleet's room is not known.
const allClasses = ^uint64(0)

// withPressure is s with the pressure of the classes not in pressed
// lifted. s is the LP's prices (base nil).
func (s *sharePrices) withPressure(pressed uint64) *sharePrices {
	out := *s
	out.base, out.pressed = s, pressed
	out.pressure = make([]float64, len(s.pressure))
	for c := range s.pressure {
		if pressed&(1<<uint(c)) != 0 {
			out.pressure[c] = s.pressure[c]
		}
	}
	return &out
}

// pressedState is the prices handed out for base while the fleet's room
// was room: base with the pressure of the classes in pressed.
type pressedState struct {
	base   *sharePrices
	room   *FreeRoom
	prices *sharePrices
}

// pressedPrices is base with the pressure the fleet's free room calls for
// (pressedBy), or base itself when no class has a pressure, the fleet does
// not know its room (FleetRoom) or the classes are too many to tell
// (pressedBy's ok). It hands out the same *sharePrices
// while base and the pressed classes stay the same.
func (c *priceCache) pressedPrices(base *sharePrices) *sharePrices {
	if !slices.ContainsFunc(base.pressure, func(p float64) bool { return p > 0 }) {
		return base
	}
	fleet, ok := c.fleet.(FleetRoom)
	if !ok {
		return base
	}
	room := fleet.RoomByModel()
	if room == nil {
		return base
	}
	last := c.pressed.Load()
	if last != nil && last.base == base && last.room == room {
		return last.prices
	}
	pressed, ok := base.pressedBy(room)
	if !ok {
		return base
	}
	next := &pressedState{base: base, room: room}
	if last != nil && last.base == base && last.prices.pressed == pressed {
		next.prices = last.prices
	} else {
		next.prices = base.withPressure(pressed)
	}
	c.pressed.Store(next)
	return next.prices
}

// pricingOn is what a priced strategy's answers on n depend on beyond the
// view, the demand, the host, the typical pods and the census (memoKey):
// the LP's prices s (fleetPrices), and which of the classes of n's GPUs
// are charged now. A class charged or lifted elsewhere leaves n's answers
// as they were, so that only the nodes of a model whose pressure changed
// are scored again.
func (s *sharePrices) pricingOn(n *NodeGPUs) (*sharePrices, uint64) {
	if s.base == nil {
		return s, allClasses // the LP's own prices: every class charged, whatever n's
	}
	base, pressed := s.base, s.pressed
	if n.Inventory == nil {
		return base, 0
	}
	if len(base.best) == 1 {
		return base, pressed & 1
	}
	var mine uint64
	for i := range n.Inventory.Devices {
		if c := base.classOf(n.Inventory.Devices[i].Model); c >= 0 && c < 64 {
			mine |= 1 << uint(c)
		}
	}
	return base, pressed & mine
}

// fleetPrices is the prices the policy's answers read now, with the
// pressure the fleet's free room calls for: PairFit's and FragFit's (the
// same *sharePrices while the LP's prices and the pressed classes stay);
// nil for a strategy without prices, and for FragFit where it reads none
// (no fleet, or no typical pod limited to models: fragFit.pressure).
func (p *Policy) fleetPrices(typical []TypicalPod) *sharePrices {
	switch s := p.strategy.(type) {
	case *pairFit:
		return s.prices.pricesFor(typical)
	case fragFit:
		if s.prices == nil || s.prices.fleet == nil || !slices.ContainsFunc(typical, func(t TypicalPod) bool { return len(t.Demand.Models) > 0 }) {
			return nil
		}
		return s.prices.pricesFor(typical)
	}
	return nil
}

// pricesNow is what the policy's answers on n depend on beyond the view,
// the demand, the host, the typical pods and the census, for the memo of
// a view's answers (memoKey): the prices and pressed classes on n
// (fleetPrices, pricingOn); nil and 0 for a policy without prices.
func (p *Policy) pricesNow(n *NodeGPUs, typical []TypicalPod) (*sharePrices, uint64) {
	s := p.fleetPrices(typical)
	if s == nil {
		return nil, 0
	}
	return s.pricingOn(n)
}
