package defrag

import (
	"context"
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// TestLeadGivesUpOnError: a leader whose defragmenter cannot start (say it
// may not read the events its hourly limits count) releases the lease and
// returns the error, instead of holding the lease doing nothing.
func TestLeadGivesUpOnError(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := fake.NewClientset()
	f := &commandFlags{leaseNamespace: "kube-system", leaseName: "gpusched-defragmenter"}
	cannot := errors.New("reading the moves of the last hour (Migrated events): forbidden")
	done := make(chan error, 1)
	go func() { done <- f.lead(ctx, client, func(context.Context) error { return cannot }) }()
	select {
	case err := <-done:
		if !errors.Is(err, cannot) {
			t.Errorf("lead returned %v, want the defragmenter's error", err)
		}
	case <-ctx.Done():
		t.Fatal("lead kept the lease after its defragmenter failed")
	}
	lease, err := client.CoordinationV1().Leases("kube-system").Get(ctx, "gpusched-defragmenter", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := lease.Spec.HolderIdentity; h != nil && *h != "" {
		t.Errorf("the lease is still held by %s", *h)
	}
}
