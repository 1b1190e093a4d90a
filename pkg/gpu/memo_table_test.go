package gpu

import (
	"reflect"
	"testing"
)

// TestMemoTable: every demand's answer is found again, with the host it
// was asked with, through the table's growth from 8 slots to 8192 and with
// IDs that collide; an answer replaced in place keeps the count; a cleared
// table answers nothing.
func TestMemoTable(t *testing.T) {
	var tab memoTable
	if _, ok := tab.get(0, Host{}); ok {
		t.Fatal("an empty table answered")
	}
	const n = 5000
	// IDs 0..n-1 out of order; in the small tables of the first puts many
	// of them share a slot and probe on.
	host := func(id int) Host { return Host{Known: true, FreeMilliCPU: int64(id), MaxGPUs: id % 9} }
	answer := func(id int) memoResult {
		return memoResult{chosen: DeviceSet(id), fit: Fit{Free: DeviceSet(id + 1), Reasons: Reasons(id % 3)}, score: int64(-id)}
	}
	for i := range n {
		id := (i * 7919) % n
		tab.put(demandID(id), host(id), answer(id))
		if tab.used != i+1 {
			t.Fatalf("after %d puts the table counts %d answers", i+1, tab.used)
		}
	}
	if len(tab.slots) != 8192 || tab.used*4 > len(tab.slots)*3 {
		t.Errorf("%d answers in %d slots, want 8192 slots (the least power of two at most 3/4 full)", tab.used, len(tab.slots))
	}
	// A look-up mostly reads the slot its ID hashes to: over all answers,
	// the slots probed past their own are fewer than the answers (linear
	// probing with an even hash at 61 % load probes about 0.8 slots past on
	// average; hashing into part of the table probes far more).
	mask := len(tab.slots) - 1
	past := 0
	for i, s := range tab.slots {
		if s.id != 0 {
			home := int((uint32(s.id-1) * 0x9E3779B1) >> tab.shift)
			past += (i - home) & mask
		}
	}
	if past >= n {
		t.Errorf("look-ups probe %d slots past their own over %d answers, want fewer than %d", past, n, n)
	}
	for id := range n {
		r, ok := tab.get(demandID(id), host(id))
		if !ok || r != answer(id) {
			t.Fatalf("id %d: (%+v, %v), want %+v", id, r, ok, answer(id))
		}
		if _, ok := tab.get(demandID(id), host(id+1)); ok {
			t.Fatalf("id %d answered for another host", id)
		}
	}
	if _, ok := tab.get(n, host(n)); ok {
		t.Error("an ID never put was answered")
	}
	tab.put(42, host(7), answer(7))
	if r, ok := tab.get(42, host(7)); !ok || r != answer(7) || tab.used != n {
		t.Errorf("replaced answer: (%+v, %v) with %d counted, want %+v with %d", r, ok, tab.used, answer(7), n)
	}
	// A table exactly 3/4 full does not grow to replace an answer.
	var full memoTable
	for id := range 6 {
		full.put(demandID(id), host(id), answer(id))
	}
	full.put(3, host(9), answer(9))
	if len(full.slots) != 8 || full.used != 6 {
		t.Errorf("6 answers, one replaced: %d slots, %d counted; want 8 and 6", len(full.slots), full.used)
	}
	if _, ok := tab.get(42, host(42)); ok {
		t.Error("the replaced answer's host still answered")
	}
	tab.clear()
	if _, ok := tab.get(1, host(1)); ok || tab.used != 0 {
		t.Errorf("a cleared table answered or counts %d", tab.used)
	}
}

// TestMemoResultHoldsAFit: a remembered answer keeps a Fit's Free and
// Reasons and drops its Excluded text (answers with one are never
// remembered). A field added to Fit must be added to memoSlot too.
func TestMemoResultHoldsAFit(t *testing.T) {
	var names []string
	for f := range reflect.TypeFor[Fit]().Fields() {
		names = append(names, f.Name)
	}
	if !reflect.DeepEqual(names, []string{"Free", "Reasons", "Excluded"}) {
		t.Errorf("Fit's fields are %v: memoSlot keeps Free and Reasons only; keep what was added too", names)
	}
	m := &viewMemo{}
	key := memoKey{}
	p := &Policy{}
	m.put(p, 3, Host{}, key, pricedBy{}, memoResult{fit: Fit{Free: 1, Excluded: "GPU 0 excluded"}})
	if r, ok := m.get(p, 3, Host{}, key, pricedBy{}); ok {
		t.Errorf("an answer with an excluded GPU was remembered: %+v", r)
	}
}
