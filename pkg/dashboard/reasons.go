package dashboard

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/gpuview"
)

// Reason classes of pending GPU pods. Each pod falls in exactly one; the set
// is fixed, so gpusched_pending_gpu_pods{reason} has a bounded number of
// series whatever the scheduler writes in a pod's condition.
const (
	// ClassInvalidRequest: the pod's GPU annotations are malformed
	// (gpuview.PendingPod.DemandError); no node can take it until they are fixed.
	ClassInvalidRequest = "invalid-request"
	// ClassGang: the pod belongs to a gang, and its condition names no GPU
	// reason: it waits for the rest of its gang.
	ClassGang = "gang"
	// ClassWaiting: the scheduler has not reported on the pod yet (no
	// PodScheduled=False condition).
	ClassWaiting = "waiting"
	// ClassOther: any other message (host resources, taints, affinity...).
	ClassOther = "other"
)

// gpuReasonClasses are the engine's reasons (gpu.Reason), each with the
// class name that stands for it: the reason's stable text, lowercased, its
// words joined by dashes ("insufficient free GPUs" -> "insufficient-free-gpus").
var gpuReasonClasses = func() []reasonClass {
	var out []reasonClass
	for r := gpu.Reason(1); r.String() != ""; r <<= 1 {
		text := r.String()
		out = append(out, reasonClass{
			class:   strings.ReplaceAll(strings.ToLower(text), " ", "-"),
			pattern: regexp.MustCompile(`(\d+) ` + regexp.QuoteMeta(text) + `\b`),
		})
	}
	return out
}()

type reasonClass struct {
	class   string
	pattern *regexp.Regexp // "<count> <reason text>", as the scheduler counts nodes per reason
}

// ReasonClasses lists every class ReasonClass can return, in a fixed order:
// the engine's reasons in their order, then invalid-request, gang, waiting
// and other.
func ReasonClasses() []string {
	out := make([]string, 0, len(gpuReasonClasses)+4)
	for _, rc := range gpuReasonClasses {
		out = append(out, rc.class)
	}
	return append(out, ClassInvalidRequest, ClassGang, ClassWaiting, ClassOther)
}

// ReasonClass sorts a pending pod into one of ReasonClasses:
//
//   - invalid-request when its GPU annotations are malformed;
//   - else the engine reason its PodScheduled=False message counts on the
//     most nodes ("0/5 nodes are available: 3 insufficient free GPUs,
//     2 GPU model not allowed." -> insufficient-free-gpus; ties go to the
//     reason listed first in ReasonClasses). Only the part before
//     "preemption:" counts: that is where the scheduler says why no node
//     fits;
//   - else gang for a member of a gang, waiting when there is no message,
//     and other for any other message.
func ReasonClass(p *gpuview.PendingPod) string {
	if p.DemandError != "" {
		return ClassInvalidRequest
	}
	msg, _, _ := strings.Cut(p.Reason, "preemption:")
	best, bestCount := "", 0
	for _, rc := range gpuReasonClasses {
		for _, m := range rc.pattern.FindAllStringSubmatch(msg, -1) {
			if n, err := strconv.Atoi(m[1]); err == nil && n > bestCount {
				best, bestCount = rc.class, n
			}
		}
	}
	switch {
	case best != "":
		return best
	case p.Gang != "":
		return ClassGang
	case strings.TrimSpace(p.Reason) == "":
		return ClassWaiting
	}
	return ClassOther
}
