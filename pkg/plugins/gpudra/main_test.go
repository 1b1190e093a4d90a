package gpudra_test

import (
	"os"
	"testing"

	"k8s.io/kubernetes/pkg/scheduler/metrics"
)

func TestMain(m *testing.M) {
	metrics.Register() // the scheduler's parallelizer reports to these
	os.Exit(m.Run())
}
