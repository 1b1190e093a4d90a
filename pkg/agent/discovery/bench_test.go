package discovery_test

import (
	"testing"

	"github.com/gpusched/gpusched/pkg/agent/discovery"
	"github.com/gpusched/gpusched/pkg/agent/nvmlmock"
)

// BenchmarkNVMLDiscover8GPU: one discovery of an 8-GPU DGX H100 mock, NVLink
// groups included, and its snapshot (annotation encoded).
func BenchmarkNVMLDiscover8GPU(b *testing.B) {
	m := nvmlmock.DGXH100()
	health := discovery.NewHealth()
	for b.Loop() {
		got, err := discovery.Discover(m, discovery.Options{})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := discovery.NewSnapshot(got, health); err != nil {
			b.Fatal(err)
		}
	}
}
