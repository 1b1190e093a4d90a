package dashboard

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"sync"
	"time"

	"github.com/gpusched/gpusched/pkg/gpuview"
)

// Sample is the cluster's fragmentation and allocation at one moment: a
// point of the dashboard's time series.
type Sample struct {
	// Seq numbers samples from 1, in the order they were taken.
	Seq  uint64    `json:"seq"`
	Time time.Time `json:"time"`
	// FragmentedPct and AllocatedPct are the cluster's, in percent of its
	// GPU capacity (gpuview.Totals).
	FragmentedPct float64 `json:"fragmentedPct"`
	AllocatedPct  float64 `json:"allocatedPct"`
	Pending       int     `json:"pending"`
}

// State is what the dashboard shows: the latest snapshot, its version, and
// the recent history of the cluster's fragmentation and allocation. It is
// safe for concurrent use; a reader gets either the previous snapshot or the
// next, never a mix.
type State struct {
	sampleEvery time.Duration
	historyLen  int
	maxPending  int

	mu        sync.Mutex
	cur       *published // nil until the first Publish
	lastError string     // why the last rebuild failed; "" when it did not
	history   []Sample   // oldest first, at most historyLen
	seq       uint64
	changed   chan struct{} // closed, and replaced, at every change
}

// published is one snapshot with its version and, encoded once on first
// request, its wire JSON (plain and gzipped).
type published struct {
	version uint64
	snap    *gpuview.Snapshot
	built   time.Time

	once     sync.Once
	body, gz []byte
	err      error
}

// NewState returns an empty State that keeps historyLen samples, takes a
// sample at most every sampleEvery (at publishes and at Tick), and lists
// at most maxPending pending pods in the page's JSON.
func NewState(historyLen int, sampleEvery time.Duration, maxPending int) *State {
	return &State{sampleEvery: sampleEvery, historyLen: max(1, historyLen), maxPending: maxPending,
		changed: make(chan struct{})}
}

// Publish makes snap the current snapshot and returns its version (1 for
// the first). It takes a history sample when none was taken within the
// sample interval. snap must not be changed afterwards.
func (s *State) Publish(snap *gpuview.Snapshot, now time.Time) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := uint64(1)
	if s.cur != nil {
		v = s.cur.version + 1
	}
	s.cur = &published{version: v, snap: snap, built: now}
	s.lastError = ""
	s.sampleLocked(now)
	s.notifyLocked()
	return v
}

// Failed records that rebuilding the snapshot failed; the last snapshot
// stays current and the page shows why.
func (s *State) Failed(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastError = err.Error()
	s.notifyLocked()
}

// Tick takes a history sample of the current snapshot if the last one is
// at least the sample interval old, so the series moves on while the
// cluster does not change.
func (s *State) Tick(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sampleLocked(now) {
		s.notifyLocked()
	}
}

func (s *State) sampleLocked(now time.Time) bool {
	if s.cur == nil {
		return false
	}
	if n := len(s.history); n > 0 && now.Sub(s.history[n-1].Time) < s.sampleEvery {
		return false
	}
	s.seq++
	c := &s.cur.snap.Cluster
	s.history = append(s.history, Sample{Seq: s.seq, Time: now, FragmentedPct: c.FragmentedPct(),
		AllocatedPct: c.AllocatedPct(), Pending: len(s.cur.snap.Pending)})
	if len(s.history) > s.historyLen {
		s.history = append(s.history[:0:0], s.history[len(s.history)-s.historyLen:]...)
	}
	return true
}

func (s *State) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// Current returns the current snapshot and its version; nil and 0 before
// the first Publish.
func (s *State) Current() (*gpuview.Snapshot, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil {
		return nil, 0
	}
	return s.cur.snap, s.cur.version
}

// Changed returns a channel closed at the next change: a publish, a new
// sample or a failed rebuild. Take it before reading the state, so that no
// change between the read and the wait is missed.
func (s *State) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// LastError is why the last rebuild failed, or "".
func (s *State) LastError() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastError
}

// History returns the samples taken after seq (all of them for 0), oldest
// first.
func (s *State) History(after uint64) []Sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, smp := range s.history {
		if smp.Seq > after {
			return append([]Sample(nil), s.history[i:]...)
		}
	}
	return nil
}

// encoded returns the current snapshot's wire JSON, plain and gzipped,
// and its version; encoded once per version however many pages ask.
func (s *State) encoded() (body, gz []byte, version uint64, err error) {
	s.mu.Lock()
	p := s.cur
	s.mu.Unlock()
	if p == nil {
		return nil, nil, 0, nil
	}
	p.once.Do(func() {
		p.body, p.err = json.Marshal(wireOf(p.snap, p.version, p.built, s.maxPending))
		if p.err != nil {
			return
		}
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
		zw.Write(p.body)
		zw.Close()
		p.gz = buf.Bytes()
	})
	return p.body, p.gz, p.version, p.err
}
