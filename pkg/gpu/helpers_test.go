package gpu_test

import (
	"testing"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// knownHost is a node whose CPU is known and whose memory is plentiful, so
// that host memory never decides.
func knownHost(freeMilliCPU int64) gpu.Host {
	return gpu.Host{Known: true, FreeMilliCPU: freeMilliCPU, FreeMemoryMiB: 1 << 30}
}

// scoreCase is a placement whose score a table test checks.
type scoreCase struct {
	name   string
	node   *gpu.NodeGPUs
	demand gpu.Demand
	want   int64
}

// checkScores places each case's demand on its node with p (the host as
// given) and checks the score; parts names a score's fields for messages.
func checkScores(t *testing.T, p *gpu.Policy, host gpu.Host, cases []scoreCase, parts func(int64) string) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			req := gpu.Request{Demand: &tt.demand, Host: host}
			chosen, fit := p.Place(tt.node, &req)
			if !fit.OK() {
				t.Fatal(fit.Reasons)
			}
			if got := p.Score(tt.node, &req, chosen); got != tt.want {
				t.Errorf("score = %d (%s), want %d (%s)", got, parts(got), tt.want, parts(tt.want))
			}
		})
	}
}
