package cyclestate

import (
	"testing"

	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// TestReadWrite: a value comes back from the cycle under its key and type;
// another key, another type or no cycle give nothing; a clone of the cycle
// (as preemption makes) shares the value.
func TestReadWrite(t *testing.T) {
	type ledger struct{ n int }
	cs := framework.NewCycleState()
	l := &ledger{n: 3}
	Write(cs, "k", l)
	if got, ok := Read[*ledger](cs, "k"); !ok || got != l {
		t.Errorf("Read = %v, %t; want the value written", got, ok)
	}
	if _, ok := Read[*ledger](cs, "other"); ok {
		t.Error("Read under another key found a value")
	}
	if _, ok := Read[string](cs, "k"); ok {
		t.Error("Read of another type found a value")
	}
	if _, ok := Read[*ledger](nil, "k"); ok {
		t.Error("Read of no cycle found a value")
	}
	if got, ok := Read[*ledger](cs.Clone(), "k"); !ok || got != l {
		t.Errorf("Read of a clone = %v, %t; want the same value", got, ok)
	}
}
