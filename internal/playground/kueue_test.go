package playground

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// kueueDir is the Kueue installation the tests run (hack/install-kueue.sh,
// which hack/test-all.sh runs): $GPUSCHED_KUEUE_DIR, else the repository's
// bin/kueue-<version>. Without one the test skips, or fails under CI.
func kueueDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("GPUSCHED_KUEUE_DIR")
	if dir == "" {
		matches, _ := filepath.Glob(filepath.Join("..", "..", "bin", "kueue-v*", kueueBinary))
		if len(matches) > 0 {
			dir = filepath.Dir(matches[len(matches)-1])
		}
	}
	missing := ""
	if dir == "" {
		missing = "no Kueue installation (bash hack/install-kueue.sh builds one)"
	} else if f, err := os.Open(filepath.Join(kueueMetricsCerts, "tls.crt")); err != nil {
		missing = fmt.Sprintf("Kueue's manager needs a readable certificate in %s (%v): run bash hack/install-kueue.sh once as root", kueueMetricsCerts, err)
	} else {
		f.Close()
	}
	if missing != "" {
		if os.Getenv("CI") != "" {
			t.Fatal(missing + "; hack/test-all.sh installs it")
		}
		t.Skip(missing)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// TestKueue runs the playground with --kueue (the real Kueue manager,
// its CRDs and webhooks) and applies examples/kueue with kubectl, as a user
// would. Kueue admits, gpusched places:
//   - the shares Job (4 × 250 milli and 4 GiB as resources) is admitted on
//     team-a's share quota, which counts 1000 milli and 16 GiB, and its pods
//     run on A100s, Kueue's flavor, sharing GPUs;
//   - the training gang (a PodGroup of 4 one-GPU workers) is admitted as one
//     workload and placed whole on one node;
//   - the inference Deployment's replicas (500 milli each) run on A100s,
//     and no GPU holds more than 1000 milli;
//   - a Job of 4 more GPUs is admitted by borrowing team-b's idle A100
//     quota (team-a's queue counts 4 borrowed), and a Job of 2 GPUs over
//     team-a's nominal plus borrowing waits
//     suspended in Kueue, with no pod pending in the scheduler, until the
//     others finish; then it runs.
func TestKueue(t *testing.T) {
	dir := kueueDir(t)
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Skip("kubectl not installed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	pg := serve(ctx, t, func(f *Flags) { f.Kueue = dir })
	t.Logf("the playground with Kueue up in %v", time.Since(start).Round(time.Millisecond))
	if !strings.Contains(pg.out.String(), "Kueue's manager") {
		t.Fatalf("the playground does not say Kueue runs:\n%s", pg.out.String())
	}
	config, client := pg.config, pg.client
	kubectl := func(args ...string) { t.Helper(); pg.kubectl(ctx, t, args...) }
	example := func(name string) string { return filepath.Join("..", "..", "examples", "kueue", name) }
	kubectl("apply", "-f", example("queues.yaml"))
	kubectl("apply", "-f", example("shares-job.yaml"))
	kubectl("apply", "-f", example("inference-deployment.yaml"))

	a100 := "NVIDIA-A100-SXM4-80GB"
	onModel := func(p v1.Pod, model string) {
		t.Helper()
		node, err := client.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := node.Labels[gpu.LabelProduct]; got != model {
			t.Errorf("pod %s/%s on %s, a %s; want %s (Kueue's flavor)", p.Namespace, p.Name, node.Name, got, model)
		}
	}
	perGPU := map[string]int64{}
	sharesOn := map[string]bool{}
	for _, p := range waitIn(ctx, t, client, "team-a", "app.kubernetes.io/name=shares", 4, v1.PodRunning, v1.PodSucceeded) {
		a := assignmentOf(t, p)
		if a.Milli != 250 {
			t.Errorf("shares pod %s: assignment %+v, want 250 milli", p.Name, a)
		}
		onModel(p, a100)
		perGPU[gpuOf(a)] += a.Milli
		sharesOn[gpuOf(a)] = true
	}
	if len(sharesOn) > 2 {
		t.Errorf("the 4 shares of 250 are on %d GPUs %v, want them sharing", len(sharesOn), perGPU)
	}
	dyn := dynamic.NewForConfigOrDie(config)
	if total, _ := queueUsage(ctx, t, dyn, "team-a", "a100", gpu.ResourceMilli, [2]int64{1000, 0}); total != 1000 {
		t.Errorf("team-a's queue counts %d milli-GPU of shares, want 4 × 250", total)
	}
	if total, _ := queueUsage(ctx, t, dyn, "team-a", "a100", gpu.ResourceMemoryMiB, [2]int64{4 * 4096, 0}); total != 4*4096 {
		t.Errorf("team-a's queue counts %d MiB of share memory, want 4 × 4096", total)
	}
	for _, p := range waitIn(ctx, t, client, "team-b", "app.kubernetes.io/name=inference", 2, v1.PodRunning) {
		a := assignmentOf(t, p)
		if a.Milli != 500 {
			t.Errorf("inference pod %s: assignment %+v, want 500 milli", p.Name, a)
		}
		onModel(p, a100)
		perGPU[gpuOf(a)] += a.Milli
	}
	for g, milli := range perGPU {
		if milli > gpu.MilliPerGPU {
			t.Errorf("GPU %s holds %d milli", g, milli)
		}
	}

	kubectl("apply", "-f", example("training-gang.yaml"))
	train := waitIn(ctx, t, client, "team-a", "app.kubernetes.io/name=train", 4, v1.PodRunning)
	for _, p := range train {
		onModel(p, a100)
		if p.Spec.NodeName != train[0].Spec.NodeName {
			t.Errorf("gang worker %s on %s, worker %s on %s: want one node", p.Name, p.Spec.NodeName, train[0].Name, train[0].Spec.NodeName)
		}
	}

	// team-a holds its 4 nominal A100s (the gang); 4 more come from team-b's
	// idle quota (borrowingLimit 4), and nothing beyond.
	if _, err := client.BatchV1().Jobs("team-a").Create(ctx, queuedJob("team-a", "borrower", "gpus", gpuLimit("4"), "40s"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	onModel(waitIn(ctx, t, client, "team-a", "app.kubernetes.io/name=borrower", 1, v1.PodRunning)[0], a100)
	if total, borrowed := queueUsage(ctx, t, dyn, "team-a", "a100", gpu.ResourceGPU, [2]int64{8, 4}); total != 8 || borrowed != 4 {
		t.Errorf("team-a's queue counts %d GPUs, %d borrowed; want 8, 4 of them borrowed from team-b", total, borrowed)
	}
	if _, err := client.BatchV1().Jobs("team-a").Create(ctx, queuedJob("team-a", "waits", "gpus", gpuLimit("2"), "1s"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// While the gang and the borrower run, "waits" stays suspended by Kueue:
	// no pod of it exists for the scheduler to keep pending.
	time.Sleep(3 * time.Second)
	job, err := client.BatchV1().Jobs("team-a").Get(ctx, "waits", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !ptr.Deref(job.Spec.Suspend, false) {
		t.Errorf("Job waits is not suspended while team-a uses its quota and all it may borrow")
	}
	if got := podsIn(ctx, client, "team-a", "app.kubernetes.io/name=waits"); len(got) != 0 {
		t.Errorf("Job waits has pods %d while over quota; want none", len(got))
	}
	// Once the gang and the borrower are done, Kueue admits it and gpusched
	// places it.
	onModel(waitIn(ctx, t, client, "team-a", "app.kubernetes.io/name=waits", 1, v1.PodRunning, v1.PodSucceeded)[0], a100)
	t.Logf("Kueue: the over-quota Job ran %v after the start", time.Since(start).Round(time.Second))
}

// queueUsage is what ClusterQueue name counts of a resource in a flavor,
// in total and borrowed: the first read that equals want (Kueue writes the
// status some time after it admits), else the last within 30 s.
func queueUsage(ctx context.Context, t *testing.T, dyn dynamic.Interface, name, flavor string, res v1.ResourceName, want [2]int64) (total, borrowed int64) {
	t.Helper()
	read := func() (int64, int64) {
		cq, err := dyn.Resource(clusterQueues).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return 0, 0
		}
		flavors, _, _ := unstructured.NestedSlice(cq.Object, "status", "flavorsUsage")
		for _, f := range flavors {
			fm, _ := f.(map[string]any)
			if fm["name"] != flavor {
				continue
			}
			resources, _, _ := unstructured.NestedSlice(fm, "resources")
			for _, r := range resources {
				rm, _ := r.(map[string]any)
				if rm["name"] != string(res) {
					continue
				}
				quantity := func(key string) int64 {
					s, _ := rm[key].(string)
					q, err := resource.ParseQuantity(s)
					if err != nil {
						return 0
					}
					return q.Value()
				}
				return quantity("total"), quantity("borrowed")
			}
		}
		return 0, 0
	}
	_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		total, borrowed = read()
		return [2]int64{total, borrowed} == want, nil
	})
	return total, borrowed
}

// queuedJob is a one-pod Job of ns for the LocalQueue queue (Kueue leaves
// it alone when queue is ""), placed by gpusched: its pod, labelled
// app.kubernetes.io/name=name, asks for 100m CPU and limits, and runs
// runTime in the playground (until deleted when "").
func queuedJob(ns, name, queue string, limits v1.ResourceList, runTime string) *batchv1.Job {
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: batchv1.JobSpec{
			Parallelism: ptr.To[int32](1), Completions: ptr.To[int32](1),
			Template: v1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app.kubernetes.io/name": name}},
				Spec: v1.PodSpec{SchedulerName: "gpusched", RestartPolicy: v1.RestartPolicyNever, Containers: []v1.Container{{
					Name: "main", Image: "registry.k8s.io/pause:3.10",
					Resources: v1.ResourceRequirements{
						Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m")},
						Limits:   limits,
					},
				}}},
			},
		},
	}
	if queue != "" {
		job.Labels = map[string]string{"kueue.x-k8s.io/queue-name": queue}
	}
	if runTime != "" {
		job.Spec.Template.Annotations = map[string]string{AnnotationRunTime: runTime}
	}
	return job
}

// gpuLimit is a limit of n whole GPUs.
func gpuLimit(n string) v1.ResourceList {
	return v1.ResourceList{gpu.ResourceGPU: resource.MustParse(n)}
}

// waitIn waits until n pods of ns match selector, each in one of phases.
func waitIn(ctx context.Context, t *testing.T, client kubernetes.Interface, ns, selector string, n int, phases ...v1.PodPhase) []v1.Pod {
	t.Helper()
	var got []v1.Pod
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		got = podsIn(ctx, client, ns, selector)
		if len(got) != n {
			return false, nil
		}
		for _, p := range got {
			if !slices.Contains(phases, p.Status.Phase) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		var state []string
		for _, p := range got {
			state = append(state, p.Name+"="+string(p.Status.Phase)+"@"+p.Spec.NodeName)
		}
		t.Fatalf("%s %s: want %d pods %v: %v; have %v", ns, selector, n, phases, err, state)
	}
	return got
}

func podsIn(ctx context.Context, client kubernetes.Interface, ns, selector string) []v1.Pod {
	list, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil
	}
	return list.Items
}

func assignmentOf(t *testing.T, p v1.Pod) gpu.Assignment {
	t.Helper()
	a, err := gpu.ParseAssignment(p.Annotations[gpu.AnnotationAssigned])
	if err != nil {
		t.Fatalf("pod %s/%s: %v", p.Namespace, p.Name, err)
	}
	return a
}

// gpuOf names a share's GPU: its node and index.
func gpuOf(a gpu.Assignment) string {
	if len(a.Devices) == 0 {
		return a.Node
	}
	return a.Node + "/" + strconv.Itoa(a.Devices[0])
}

// TestKueueBurst measures a burst of 200 one-pod Jobs of 50 milli each (as
// a resource), from creation to every pod bound, through Kueue and gpusched
// against the same burst straight to gpusched (no queue-name label, so
// Kueue leaves it alone), in alternating rounds on one playground. It is a
// measurement, not a check: it runs only with GPUSCHED_KUEUE_BURST=ROUNDS
// set, and logs each round and the medians (docs/benchmarks.md, "Kueue").
func TestKueueBurst(t *testing.T) {
	rounds, _ := strconv.Atoi(os.Getenv("GPUSCHED_KUEUE_BURST"))
	if rounds <= 0 {
		t.Skip("a measurement: set GPUSCHED_KUEUE_BURST=ROUNDS")
	}
	dir := kueueDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	config := serve(ctx, t, func(f *Flags) { f.Kueue = dir }).config
	config.QPS, config.Burst = 500, 1000
	client := kubernetes.NewForConfigOrDie(config)
	apply, err := newApplier(config)
	if err != nil {
		t.Fatal(err)
	}
	queue := []byte(`apiVersion: v1
kind: Namespace
metadata: {name: burst}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: any}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: burst}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, memory, gpusched.io/gpu-milli]
    flavors:
    - name: any
      resources:
      - {name: cpu, nominalQuota: 1000}
      - {name: memory, nominalQuota: 1000Gi}
      - {name: gpusched.io/gpu-milli, nominalQuota: 100000}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: burst, namespace: burst}
spec: {clusterQueue: burst}
`)
	if err := apply.create(ctx, "the burst's queue", queue); err != nil {
		t.Fatal(err)
	}
	const jobs = 200
	burst := func(round int, kueue bool) time.Duration {
		name, queue := fmt.Sprintf("r%d-direct", round), ""
		if kueue {
			name, queue = fmt.Sprintf("r%d-kueue", round), "burst"
		}
		share := v1.ResourceList{gpu.ResourceMilli: resource.MustParse("50")}
		start := time.Now()
		for i := range jobs {
			job := queuedJob("burst", fmt.Sprintf("%s-%03d", name, i), queue, share, "")
			job.Spec.Template.Labels["round"] = name
			job.Spec.Template.Spec.Containers[0].Resources.Requests = v1.ResourceList{
				v1.ResourceCPU: resource.MustParse("10m"), v1.ResourceMemory: resource.MustParse("16Mi")}
			if _, err := client.BatchV1().Jobs("burst").Create(ctx, job, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
			bound := 0
			for _, p := range podsIn(ctx, client, "burst", "round="+name) {
				if p.Spec.NodeName != "" {
					bound++
				}
			}
			return bound == jobs, nil
		})
		if err != nil {
			t.Fatalf("round %s: %v", name, err)
		}
		took := time.Since(start)
		background := metav1.DeletePropagationBackground
		if err := client.BatchV1().Jobs("burst").DeleteCollection(ctx, metav1.DeleteOptions{PropagationPolicy: &background}, metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
		_ = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
			return len(podsIn(ctx, client, "burst", "")) == 0, nil
		})
		return took
	}
	var withKueue, direct []time.Duration
	for r := range rounds {
		// Alternate which goes first, so drift in the machine's load falls
		// on both.
		if r%2 == 0 {
			withKueue = append(withKueue, burst(r, true))
			direct = append(direct, burst(r, false))
		} else {
			direct = append(direct, burst(r, false))
			withKueue = append(withKueue, burst(r, true))
		}
		t.Logf("round %d: %d Jobs created to bound: through Kueue %v, straight to gpusched %v, ratio %.2f",
			r, jobs, withKueue[r].Round(time.Millisecond), direct[r].Round(time.Millisecond), withKueue[r].Seconds()/direct[r].Seconds())
	}
	median := func(d []time.Duration) time.Duration {
		s := slices.Clone(d)
		slices.Sort(s)
		return s[len(s)/2]
	}
	ratios := make([]float64, rounds)
	for i := range ratios {
		ratios[i] = withKueue[i].Seconds() / direct[i].Seconds()
	}
	slices.Sort(ratios)
	t.Logf("medians over %d rounds: through Kueue %v, straight %v; ratio median %.2f (min %.2f, max %.2f)",
		rounds, median(withKueue).Round(time.Millisecond), median(direct).Round(time.Millisecond), ratios[len(ratios)/2], ratios[0], ratios[len(ratios)-1])
}

// TestKueuePreemption: on one node of 8 A100s, team pa runs two Jobs of 4
// GPUs, its own 4 and 4 borrowed from team pb; when pb asks for its 4 back,
// Kueue preempts one of pa's Jobs (it suspends it, and the Job controller
// deletes its pod), gpusched's ledger frees the pod's GPUs, and pb's Job is
// placed on exactly those: no other GPU is free. Without the GPUs freed, pb's
// pod would stay pending.
func TestKueuePreemption(t *testing.T) {
	dir := kueueDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	pg := serve(ctx, t, func(f *Flags) { f.Kueue = dir; f.Nodes = "1xA100-80GB:8" })
	client := pg.client
	apply, err := newApplier(pg.config)
	if err != nil {
		t.Fatal(err)
	}
	queue := func(name, borrowing string) string {
		return fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata: {name: %[1]s}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: %[1]s}
spec:
  cohortName: preempt
  namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: %[1]s}}
  preemption: {reclaimWithinCohort: Any}
  resourceGroups:
  - coveredResources: [cpu, memory]
    flavors:
    - name: any-node
      resources: [{name: cpu, nominalQuota: 32}, {name: memory, nominalQuota: 128Gi}]
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: a100
      resources: [{name: nvidia.com/gpu, nominalQuota: 4%[2]s}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: gpus, namespace: %[1]s}
spec: {clusterQueue: %[1]s}
`, name, borrowing)
	}
	flavors := `apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: any-node}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: a100}
spec: {nodeLabels: {nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB}}
`
	if err := apply.create(ctx, "the preemption test's queues", []byte(flavors+"---\n"+queue("pa", ", borrowingLimit: 4")+"---\n"+queue("pb", ""))); err != nil {
		t.Fatal(err)
	}
	held := map[string]gpu.Assignment{}
	for _, name := range []string{"first", "second"} {
		if _, err := client.BatchV1().Jobs("pa").Create(ctx, queuedJob("pa", name, "gpus", gpuLimit("4"), ""), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		held[name] = assignmentOf(t, waitIn(ctx, t, client, "pa", "app.kubernetes.io/name="+name, 1, v1.PodRunning)[0])
	}

	if _, err := client.BatchV1().Jobs("pb").Create(ctx, queuedJob("pb", "reclaim", "gpus", gpuLimit("4"), ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	reclaim := assignmentOf(t, waitIn(ctx, t, client, "pb", "app.kubernetes.io/name=reclaim", 1, v1.PodRunning)[0])
	// Kueue chose one of pa's Jobs to preempt; it is suspended, without pods.
	var preempted []string
	for name := range held {
		j, err := client.BatchV1().Jobs("pa").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if ptr.Deref(j.Spec.Suspend, false) {
			preempted = append(preempted, name)
		}
	}
	if len(preempted) != 1 {
		t.Fatalf("Kueue suspended pa's Jobs %v, want one of the two", preempted)
	}
	if got := podsIn(ctx, client, "pa", "app.kubernetes.io/name="+preempted[0]); len(got) != 0 {
		t.Errorf("pa's preempted Job %s still has %d pods", preempted[0], len(got))
	}
	freed := held[preempted[0]].Devices
	if !slices.Equal(slices.Sorted(slices.Values(reclaim.Devices)), slices.Sorted(slices.Values(freed))) {
		t.Errorf("pb's Job got GPUs %v, want the %v pa's preempted Job %s held (the only ones free)", reclaim.Devices, freed, preempted[0])
	}
}
