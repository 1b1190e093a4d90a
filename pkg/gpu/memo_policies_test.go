package gpu

import "testing"

// TestViewMemoKeepsEachPolicysAnswers: policies asking about one view with
// the same demand ID (each interns its own) keep each its own answer, as
// the simulator's environment asks with its score columns' policies beside
// the scheduler's; another census drops them all, other prices only the
// policy's own.
func TestViewMemoKeepsEachPolicysAnswers(t *testing.T) {
	a, b := &Policy{}, &Policy{}
	typical := []TypicalPod{{Demand: Demand{Count: 1, Milli: 1000}, Weight: 1}}
	census := ModelGPUs{{Model: "T4", GPUs: 8}}
	m := &viewMemo{}
	m.put(a, 0, Host{}, memoKey{typical, census}, pricedBy{}, memoResult{score: 11})
	m.put(b, 0, Host{}, memoKey{typical, census}, pricedBy{}, memoResult{score: 22})
	for _, tc := range []struct {
		p    *Policy
		want int64
	}{{a, 11}, {b, 22}} {
		if r, ok := m.get(tc.p, 0, Host{}, memoKey{typical, census}, pricedBy{}); !ok || r.score != tc.want {
			t.Errorf("get = (%+v, %v), want score %d remembered", r, ok, tc.want)
		}
	}
	if _, ok := m.get(a, 0, Host{FreeMilliCPU: 1}, memoKey{typical, census}, pricedBy{}); ok {
		t.Error("answered for another host")
	}
	other := ModelGPUs{{Model: "T4", GPUs: 7}}
	m.put(a, 1, Host{}, memoKey{typical, other}, pricedBy{}, memoResult{score: 33})
	if _, ok := m.get(b, 0, Host{}, memoKey{typical, other}, pricedBy{}); ok {
		t.Error("kept an answer measured on another census")
	}
	if r, ok := m.get(a, 1, Host{}, memoKey{typical, other}, pricedBy{}); !ok || r.score != 33 {
		t.Errorf("get = (%+v, %v), want score 33 remembered", r, ok)
	}
	// Other prices (a class's pressure charged or lifted) drop the
	// policy's own answers, not the other policies'.
	key := memoKey{typical, other}
	m.put(b, 1, Host{}, key, pricedBy{}, memoResult{score: 55})
	priced := pricedBy{&sharePrices{}, 1}
	if _, ok := m.get(a, 1, Host{}, key, priced); ok {
		t.Error("kept an answer measured with other prices")
	}
	m.put(a, 1, Host{}, key, priced, memoResult{score: 44})
	if _, ok := m.get(a, 1, Host{}, key, pricedBy{priced.prices, 0}); ok {
		t.Error("kept an answer measured with other classes charged")
	}
	if _, ok := m.get(a, 1, Host{}, key, pricedBy{&sharePrices{}, 1}); ok {
		t.Error("kept an answer measured with other prices (equal, not the same)")
	}
	if r, ok := m.get(a, 1, Host{}, key, priced); !ok || r.score != 44 {
		t.Errorf("get = (%+v, %v), want score 44 remembered", r, ok)
	}
	if r, ok := m.get(b, 1, Host{}, key, pricedBy{}); !ok || r.score != 55 {
		t.Errorf("policy b after a's prices changed: (%+v, %v), want its score 55 kept", r, ok)
	}
	m.put(a, 1, Host{}, key, pricedBy{}, memoResult{score: 33})
	// A ninth policy's answers push out the first's, not grow the memo.
	policies := []*Policy{a}
	for i := range maxMemoPolicies {
		q := &Policy{}
		policies = append(policies, q)
		m.put(q, 1, Host{}, memoKey{typical, other}, pricedBy{}, memoResult{score: int64(i)})
	}
	if len(m.byPolicy) != maxMemoPolicies {
		t.Errorf("%d policies' answers kept, want at most %d", len(m.byPolicy), maxMemoPolicies)
	}
	if _, ok := m.get(a, 1, Host{}, memoKey{typical, other}, pricedBy{}); ok {
		t.Error("the oldest policy's answer outlived eight newer policies'")
	}
	if r, ok := m.get(policies[len(policies)-1], 1, Host{}, memoKey{typical, other}, pricedBy{}); !ok || r.score != maxMemoPolicies-1 {
		t.Errorf("the newest policy's answer: (%+v, %v), want score %d", r, ok, maxMemoPolicies-1)
	}
}
