package extender

import (
	"bytes"
	"runtime"
	"sync"

	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// A filter or prioritize request names thousands of nodes: the lists it
// needs are reused across requests instead of being allocated anew, which
// keeps the garbage collector's work, and so the extender's latency tail,
// small. Whatever is put back must no longer be used.

// candidateLists are reused across requests: a request for thousands of
// nodes would otherwise allocate its list anew each time.
var candidateLists = sync.Pool{New: func() any { return new([]candidate) }}

// Lists of node names and of priorities are reused too: the server returns
// those of a request and its answer once the answer is written (release).
var (
	nameLists     = sync.Pool{New: func() any { return new([]string) }}
	priorityLists = sync.Pool{New: func() any { return new(extenderv1.HostPriorityList) }}
)

// getNames returns an empty list of names with room for n.
func getNames(n int) []string {
	out := *nameLists.Get().(*[]string)
	if cap(out) < n {
		return make([]string, 0, n)
	}
	return out[:0]
}

// putNames makes a list of names reusable; nothing may use it afterwards.
func putNames(names []string) {
	if cap(names) == 0 {
		return
	}
	clear(names[:cap(names)])
	names = names[:0]
	nameLists.Put(&names)
}

func getPriorities(n int) extenderv1.HostPriorityList {
	out := *priorityLists.Get().(*extenderv1.HostPriorityList)
	if cap(out) < n {
		return make(extenderv1.HostPriorityList, 0, n)
	}
	return out[:0]
}

func putPriorities(l extenderv1.HostPriorityList) {
	if cap(l) == 0 {
		return
	}
	clear(l[:cap(l)])
	l = l[:0]
	priorityLists.Put(&l)
}

func putCandidates(list *[]candidate) {
	clear(*list) // drop the references to nodes and states
	*list = (*list)[:0]
	candidateLists.Put(list)
}

// maxPooledBuffer: larger buffers (a request with thousands of full Node
// objects) are left to the garbage collector instead of being kept.
const maxPooledBuffer = 1 << 20

var (
	buffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}
	answers = sync.Pool{New: func() any { return new([]byte) }}
)

func getBuffer() *bytes.Buffer {
	b := buffers.Get().(*bytes.Buffer)
	b.Reset()
	return b
}

func putBuffer(b *bytes.Buffer) {
	if b.Cap() <= maxPooledBuffer {
		buffers.Put(b)
	}
}

// parallelMin is the number of nodes below which a request is evaluated on
// one goroutine: below it, starting goroutines costs more than it saves.
const parallelMin = 256

// parallelize runs fn over [0, n) in contiguous chunks, one per CPU, and
// returns when all are done.
func parallelize(n int, fn func(lo, hi int)) {
	workers := min(runtime.GOMAXPROCS(0), n/parallelMin)
	if workers <= 1 {
		fn(0, n)
		return
	}
	var wg sync.WaitGroup
	chunk := (n + workers - 1) / workers
	for lo := 0; lo < n; lo += chunk {
		wg.Go(func() { fn(lo, min(lo+chunk, n)) })
	}
	wg.Wait()
}

// scoreStep is a Prioritize call's score step (gpu.Policy.ScoreStep): each
// candidate's view and request (nil and zero for a node outside the step)
// and its answer.
type scoreStep struct {
	views []*gpu.NodeGPUs
	reqs  []gpu.Request
	out   []gpu.NodeScore
}

var scoreSteps = sync.Pool{New: func() any { return &scoreStep{} }}

// getStep returns a score step for n candidates, every view nil.
func getStep(n int) *scoreStep {
	s := scoreSteps.Get().(*scoreStep)
	if cap(s.views) < n {
		*s = scoreStep{views: make([]*gpu.NodeGPUs, n), reqs: make([]gpu.Request, n), out: make([]gpu.NodeScore, n)}
		return s
	}
	s.views, s.reqs, s.out = s.views[:n], s.reqs[:n], s.out[:n]
	return s
}

// putStep returns s to the pool, holding no views or demands.
func putStep(s *scoreStep) {
	clear(s.views)
	clear(s.reqs)
	scoreSteps.Put(s)
}
