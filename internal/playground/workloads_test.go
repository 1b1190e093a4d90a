package playground

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"
)

// TestKubectlWorkloads serves the playground and applies each file of
// examples/workloads with `kubectl apply -f`, as a user would, then checks
// the placements: the shares Job's 4 pods each get a 250m share; the
// inference Deployment's replicas, scaled with `kubectl scale` to 6, land
// on T4s; the GPUGang gang's 8 workers all run on the H100 node; and the
// Workload API gang, applied while they hold every H100, binds none of its
// workers until they are done, then all 8 on that node.
func TestKubectlWorkloads(t *testing.T) {
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Skip("kubectl not installed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	pg := serve(ctx, t, nil)
	client := pg.client
	kubectl := func(args ...string) { t.Helper(); pg.kubectl(ctx, t, args...) }
	file := func(name string) string { return filepath.Join("..", "..", "examples", "workloads", name) }

	kubectl("apply", "-f", file("shares-job.yaml"))
	kubectl("apply", "-f", file("inference-deployment.yaml"))
	for _, p := range waitFor(ctx, t, client, "app.kubernetes.io/name=shares", 4, v1.PodSucceeded) {
		if a := p.Annotations["gpusched.io/gpu-assigned"]; !strings.Contains(a, "milli=250;memory=4096") {
			t.Errorf("shares pod %s: assignment %q", p.Name, a)
		}
	}
	waitFor(ctx, t, client, "app.kubernetes.io/name=inference", 2, v1.PodRunning)
	kubectl("scale", "deployment", "inference", "--replicas", "6")
	for _, p := range waitFor(ctx, t, client, "app.kubernetes.io/name=inference", 6, v1.PodRunning) {
		if !strings.HasPrefix(p.Spec.NodeName, "t4-16gb-") {
			t.Errorf("inference pod %s on %s, want a T4 node", p.Name, p.Spec.NodeName)
		}
	}
	// The workers run 5 s: apply the Workload API gang while they hold the
	// H100s, then none of it may bind until they have succeeded. (On a slow
	// machine they may have finished before the poll sees them running;
	// the check below still holds then.)
	kubectl("apply", "-f", file("training-gang.yaml"))
	train := waitFor(ctx, t, client, "app.kubernetes.io/name=train", 8, v1.PodRunning, v1.PodSucceeded)
	kubectl("apply", "-f", file("training-workload.yaml"))
	waitFor(ctx, t, client, "app.kubernetes.io/name=train", 8, v1.PodSucceeded)
	workload := waitFor(ctx, t, client, "app.kubernetes.io/name=train-workload", 8, v1.PodSucceeded)
	var lastTrainFinished time.Time
	for _, p := range pods(ctx, t, client, "app.kubernetes.io/name=train") {
		for _, c := range p.Status.ContainerStatuses {
			if c.State.Terminated != nil && c.State.Terminated.FinishedAt.After(lastTrainFinished) {
				lastTrainFinished = c.State.Terminated.FinishedAt.Time
			}
		}
	}
	for _, p := range append(train, workload...) {
		if p.Spec.NodeName != "h100-80gb-0" {
			t.Errorf("gang worker %s on %s, want every worker on h100-80gb-0", p.Name, p.Spec.NodeName)
		}
	}
	for _, p := range workload {
		if c := podCondition(&p, v1.PodScheduled); c == nil || c.LastTransitionTime.Time.Before(lastTrainFinished.Truncate(time.Second)) {
			t.Errorf("workload gang worker %s scheduled (%v) before the GPUGang gang finished (%v)", p.Name, c, lastTrainFinished)
		}
	}
}

// waitFor polls until n pods match selector, all in phase, and returns them.
func waitFor(ctx context.Context, t *testing.T, client kubernetes.Interface, selector string, n int, phases ...v1.PodPhase) []v1.Pod {
	t.Helper()
	return waitIn(ctx, t, client, DemoNamespace, selector, n, phases...)
}

func pods(ctx context.Context, _ *testing.T, client kubernetes.Interface, selector string) []v1.Pod {
	return podsIn(ctx, client, DemoNamespace, selector)
}

func podCondition(p *v1.Pod, typ v1.PodConditionType) *v1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == typ {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// TestGangProfiles: the playground's gang profile is that of
// examples/gpusched-workload-config.yaml but for its schedulerName (and its
// queueSort, which the playground gives every profile).
func TestGangProfiles(t *testing.T) {
	var own struct {
		Profiles []map[string]any `json:"profiles"`
	}
	if err := yaml.Unmarshal([]byte(GangProfiles), &own); err != nil {
		t.Fatal(err)
	}
	if len(own.Profiles) != 1 {
		t.Fatalf("%d profiles in gang-profiles.yaml, want 1", len(own.Profiles))
	}
	for i, tc := range []struct{ example, name string }{
		{"gpusched-workload-config.yaml", "gpusched-workload"},
	} {
		raw, err := os.ReadFile(filepath.Join("..", "..", "examples", tc.example))
		if err != nil {
			t.Fatal(err)
		}
		var example struct {
			Profiles []map[string]any `json:"profiles"`
		}
		if err := yaml.Unmarshal(raw, &example); err != nil {
			t.Fatal(err)
		}
		want := example.Profiles[0]
		want["schedulerName"] = tc.name
		delete(want["plugins"].(map[string]any), "queueSort")
		if got := own.Profiles[i]; !reflect.DeepEqual(got, want) {
			t.Errorf("profile %s differs from examples/%s's:\n got %v\nwant %v", tc.name, tc.example, got, want)
		}
	}
	config, err := PlaygroundConfig()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"schedulerName: gpusched\n", "schedulerName: gpusched-workload\n"} {
		if !strings.Contains(config, name) {
			t.Errorf("the playground's configuration has no %q", name)
		}
	}
}

// served is a playground a test serves.
type served struct {
	flags  *Flags
	opts   Options
	out    *syncBuffer // what it printed
	config *rest.Config
	client kubernetes.Interface
}

// serve serves the playground with its default flags, changed by set when
// not nil, and a kubeconfig in a temporary directory, until the test ends.
func serve(ctx context.Context, t *testing.T, set func(*Flags)) *served {
	t.Helper()
	s := &served{flags: NewFlags()}
	s.flags.Kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	if set != nil {
		set(s.flags)
	}
	var err error
	if s.opts, err = s.flags.Options(); err != nil {
		t.Fatal(err)
	}
	s.out = servePlayground(ctx, t, s.opts)
	if s.config, err = clientcmd.BuildConfigFromFlags("", s.flags.Kubeconfig); err != nil {
		t.Fatal(err)
	}
	s.client = kubernetes.NewForConfigOrDie(s.config)
	return s
}

// kubectl runs kubectl against the playground, as a user would; a failure
// fails the test.
func (s *served) kubectl(ctx context.Context, t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, "kubectl", args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+s.flags.Kubeconfig)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, b)
	}
}

// servePlayground runs the playground (without --demo) until the test ends,
// and returns its output once it says it is up; Run's error, if any, fails
// the test when it stops.
func servePlayground(ctx context.Context, t *testing.T, opts Options) *syncBuffer {
	t.Helper()
	runCtx, stop := context.WithCancel(ctx)
	out := &syncBuffer{}
	result, returned := make(chan error, 1), make(chan struct{})
	go func() { result <- Run(runCtx, opts, out); close(returned) }()
	t.Cleanup(func() {
		stop()
		if err := <-result; err != nil {
			t.Errorf("Run: %v\n%s", err, out.String())
		}
	})
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		select {
		case <-returned:
			return false, errors.New("Run returned before the playground was up")
		default:
		}
		return strings.Contains(out.String(), "export KUBECONFIG="), nil
	})
	if err != nil {
		t.Fatalf("the playground did not come up: %v\n%s", err, out.String())
	}
	return out
}
