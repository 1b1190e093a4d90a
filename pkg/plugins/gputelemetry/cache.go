package gputelemetry

import (
	"sync"
	"sync/atomic"

	"github.com/gpusched/gpusched/pkg/telemetry"
)

// scoreCache memoizes nodes' telemetry scores for one snapshot, one set of
// weights and one GPU count. A node's score depends on nothing else but its
// GPU inventory, so pods with the same count and sensitivity read it in one
// lookup until the next refresh; Score costs a telemetry.ScoreNode per node
// per refresh rather than per pod.
type scoreCache struct {
	snap    *telemetry.Snapshot
	weights telemetry.Weights
	count   int
	// nodes maps a node name to its *cachedScore.
	nodes sync.Map
}

// cachedScore is a node's score, computed against one version of the node.
type cachedScore struct {
	resourceVersion string
	score           int64
}

// scoreCaches holds the caches of the weightings in use. It keeps at most a
// few: one per distinct (weights, count) of recent pods, all for the newest
// snapshot.
type scoreCaches struct {
	mu      sync.Mutex
	current atomic.Pointer[[]*scoreCache]
}

// maxScoreCaches bounds the weightings kept per snapshot.
const maxScoreCaches = 8

// get returns the cache for (snap, weights, count), creating it if needed.
// Caches of another snapshot are dropped.
func (c *scoreCaches) get(snap *telemetry.Snapshot, weights *telemetry.Weights, count int) *scoreCache {
	if list := c.current.Load(); list != nil {
		for _, sc := range *list {
			if sc.snap == snap && sc.count == count && sc.weights == *weights {
				return sc
			}
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var kept []*scoreCache
	if list := c.current.Load(); list != nil {
		for _, sc := range *list {
			if sc.snap == snap && sc.count == count && sc.weights == *weights {
				return sc
			}
			if sc.snap == snap && len(kept) < maxScoreCaches-1 {
				kept = append(kept, sc)
			}
		}
	}
	sc := &scoreCache{snap: snap, weights: *weights, count: count}
	kept = append(kept, sc)
	c.current.Store(&kept)
	return sc
}

// lookup returns the node's cached score for the given node version.
func (sc *scoreCache) lookup(node, resourceVersion string) (int64, bool) {
	if resourceVersion == "" {
		return 0, false
	}
	v, ok := sc.nodes.Load(node)
	if !ok {
		return 0, false
	}
	c := v.(*cachedScore)
	return c.score, c.resourceVersion == resourceVersion
}

func (sc *scoreCache) store(node, resourceVersion string, score int64) {
	if resourceVersion != "" {
		sc.nodes.Store(node, &cachedScore{resourceVersion: resourceVersion, score: score})
	}
}
