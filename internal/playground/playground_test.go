package playground

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gpusched/gpusched/pkg/agent/nvmlmock"
	"github.com/gpusched/gpusched/pkg/gpu"
)

// TestDemo runs what `gpusched-playground --demo` runs and checks that it
// succeeds and prints every pod's placement, the GPUs the node agent gives
// its containers (exactly those of its assignment), and why the pod that
// cannot fit is pending.
func TestDemo(t *testing.T) {
	opts, out := runDemoWith(t, "")
	t.Logf("output:\n%s", out.String())

	rows := map[string][]string{} // pod name -> the row's columns, split on 2+ spaces
	for _, line := range strings.Split(out.String(), "\n") {
		cols := splitColumns(line)
		if len(cols) == 6 {
			rows[cols[0]] = cols
		}
	}
	if !strings.Contains(out.String(), "Node agents published 32 GPUs") {
		t.Errorf("the output does not say that the node agents published the 5 nodes' 8+8+8+4+4 = 32 GPUs")
	}
	for _, p := range DemoPods(opts.Shapes, "gpusched") {
		row, ok := rows[p.Name]
		if !ok {
			t.Errorf("no row for pod %s", p.Name)
			continue
		}
		node, gpus, phase := row[2], row[3], row[4]
		switch p.Name {
		case "too-big":
			if node != "-" || phase != "Pending" {
				t.Errorf("too-big: %q", row)
			}
		case "batch-job":
			if phase != "Succeeded" || !strings.HasPrefix(gpus, "GPU ") {
				t.Errorf("batch-job: %q", row)
			}
		default:
			if node == "-" || !strings.HasPrefix(gpus, "GPU") || phase != "Running" {
				t.Errorf("%s not placed and running: %q", p.Name, row)
			}
		}
	}
	for _, name := range []string{"notebook-0", "notebook-1", "notebook-2"} {
		if gpus := rows[name]; len(gpus) == 6 && !strings.HasSuffix(gpus[3], "(250m, 10 GiB)") {
			t.Errorf("%s: GPUs %q, want a 250m share with 10 GiB", name, gpus[3])
		}
	}
	var all []*v1.Pod
	for name := range rows {
		if name != "POD" {
			all = append(all, demoPod(name))
		}
	}
	checkDevices(t, opts.Shapes, all, rows)
	if row := rows["inference"]; len(row) == 6 && !strings.HasPrefix(row[2], "t4-16gb-") {
		t.Errorf("inference asks for T4-16GB only, placed on %s", row[2])
	}
	if !strings.Contains(out.String(), "too-big: 0/5 nodes are available: 5 too few GPUs on node") {
		t.Errorf("the output does not say why too-big is pending")
	}
	checkWorkloads(t, out.String(), rows)
}

// checkWorkloads checks the rows of examples/workloads' pods: the shares
// Job's 4 pods each had a 250m share with 4 GiB and succeeded; the
// inference Deployment was scaled to 6 replicas, each a 500m share of a T4;
// each 8-worker gang ran all its workers on the one H100 node, every worker
// on its own GPU; and one gang was reported waiting while the other held
// the H100s.
func checkWorkloads(t *testing.T, out string, rows map[string][]string) {
	t.Helper()
	owners := []struct {
		owner, pattern string
		count          int
		node, gpus     string // prefix of NODE, suffix of GPUS
		phase          string
	}{
		{"shares", `^shares-[a-z0-9]{5}$`, 4, "", "(250m, 4 GiB)", "Succeeded"},
		{"inference", `^inference-[a-z0-9]+-[a-z0-9]{5}$`, DemoInferenceReplicas, "t4-16gb-", "(500m)", "Running"},
		{"train", `^train-[a-z0-9]{5}$`, 8, "h100-80gb-0", "", "Succeeded"},
		{"train-workload", `^train-workload-[a-z0-9]{5}$`, 8, "h100-80gb-0", "", "Succeeded"},
	}
	for _, o := range owners {
		re := regexp.MustCompile(o.pattern)
		gpus := map[string]bool{}
		n := 0
		for name, row := range rows {
			if !re.MatchString(name) {
				continue
			}
			n++
			node, g, phase := row[2], row[3], row[4]
			if !strings.HasPrefix(node, o.node) || node == "-" || !strings.HasSuffix(g, o.gpus) || phase != o.phase {
				t.Errorf("%s: %q, want node %s*, GPUs *%s, %s", o.owner, row, o.node, o.gpus, o.phase)
			}
			if o.node == "h100-80gb-0" {
				if gpus[g] {
					t.Errorf("%s: two workers on %s", o.owner, g)
				}
				gpus[g] = true
			}
		}
		if n != o.count {
			t.Errorf("%s: %d pods in the table, want %d", o.owner, n, o.count)
		}
	}
	if !strings.Contains(out, "Scaled deployment inference to 6 replicas") {
		t.Error("the output does not say the inference Deployment was scaled")
	}
	// The Workload API gang asks for the H100s the training Job's gang
	// holds: the demo submits it once that gang is done.
	if !regexp.MustCompile(`Job train done; submitted examples/workloads/training-workload.yaml after [0-9.]+m?s`).MatchString(out) {
		t.Error("the output does not say that the Workload API gang was submitted after the training Job's gang")
	}
}

// checkDevices checks the DEVICES column: each bound pod's containers get
// NVIDIA_VISIBLE_DEVICES with exactly the UUIDs of the GPUs its GPUS column
// (its assignment) names on its node, which are the node's mock GPUs
// nvmlmock.MachineUUID(<node's position>, <GPU index>); no whole GPU goes to
// two pods at once (a Succeeded pod has given its GPUs back); a pod that is
// not bound gets nothing.
func checkDevices(t *testing.T, shapes []NodeShape, pods []*v1.Pod, rows map[string][]string) {
	t.Helper()
	nodes, err := Nodes(shapes)
	if err != nil {
		t.Fatal(err)
	}
	position := map[string]int{}
	for k, n := range nodes {
		position[n.Name] = k
	}
	holder := map[string]string{} // UUID -> the pod holding it whole
	for _, p := range pods {
		name, row := p.Name, rows[p.Name]
		if len(row) != 6 {
			continue // reported by TestDemo
		}
		node, gpus, devices := row[2], row[3], row[5]
		k, bound := position[node]
		if !bound {
			if devices != "-" {
				t.Errorf("%s is not bound but its DEVICES are %q", name, devices)
			}
			continue
		}
		// "GPUs 0,1" or "GPU 2 (250m, 10 GiB)": the indices are the second field.
		fields := strings.Fields(gpus)
		var want []string
		for _, index := range strings.Split(fields[1], ",") {
			i, err := strconv.Atoi(index)
			if err != nil {
				t.Fatalf("%s: GPUS column %q", name, gpus)
			}
			want = append(want, nvmlmock.MachineUUID(k, i))
		}
		if wantDevices := "NVIDIA_VISIBLE_DEVICES=" + strings.Join(want, ","); devices != wantDevices {
			t.Errorf("%s on %s (%s): DEVICES %q, want %q", name, node, gpus, devices, wantDevices)
		}
		if len(fields) == 2 && row[4] != "Succeeded" { // whole GPUs, still held
			for _, u := range want {
				if other, taken := holder[u]; taken {
					t.Errorf("%s and %s both hold GPU %s whole", other, name, u)
				}
				holder[u] = name
			}
		}
	}
}

// splitColumns splits a table row on runs of two or more spaces.
func splitColumns(line string) []string {
	var cols []string
	for _, c := range strings.Split(line, "  ") {
		if c = strings.TrimSpace(c); c != "" {
			cols = append(cols, c)
		}
	}
	return cols
}

// TestServe runs the playground without --demo: a client using the
// kubeconfig it writes creates a pod with a run time, gpusched places it,
// the simulated kubelet runs it to Succeeded, and cancelling the context
// (Ctrl-C) stops everything and removes the kubeconfig.
func TestServe(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	flags := NewFlags()
	flags.Nodes = "1xA100-80GB:2"
	flags.Kubeconfig = filepath.Join(t.TempDir(), "kube", "config")
	opts, err := flags.Options()
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var out syncBuffer
	result := make(chan error, 1)
	go func() { result <- Run(runCtx, opts, &out) }()

	// The kubectl line is printed once everything runs.
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		select {
		case err := <-result:
			t.Fatalf("Run returned early: %v\n%s", err, out.String())
		default:
		}
		return strings.Contains(out.String(), "export KUBECONFIG="+flags.Kubeconfig), nil
	})
	if err != nil {
		t.Fatalf("no kubectl line: %v\n%s", err, out.String())
	}
	config, err := clientcmd.BuildConfigFromFlags("", flags.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(config)
	pod := annotate(share(demoPod("mine"), 300, "20Gi"), AnnotationRunTime, "1s")
	pod.Spec.SchedulerName = "gpusched"
	if _, err := client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var got *v1.Pod
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err = client.CoreV1().Pods("default").Get(ctx, "mine", metav1.GetOptions{})
		return err == nil && got.Status.Phase == v1.PodSucceeded, nil
	})
	if err != nil {
		t.Fatalf("pod did not succeed: %v; last read %+v", err, got)
	}
	// The UUID is that of the node agent's discovery on the node's mock GPUs.
	if a := got.Annotations[gpu.AnnotationAssigned]; a != "node=a100-80gb-0;gpus=0;milli=300;memory=20480;uuids="+nvmlmock.MachineUUID(0, 0) {
		t.Errorf("assignment %q", a)
	}

	stop()
	select {
	case err := <-result:
		if err != nil {
			t.Fatalf("Run after Ctrl-C: %v", err)
		}
	case <-time.After(time.Minute):
		buf := make([]byte, 1<<20)
		t.Fatalf("Run did not return after cancel; goroutines:\n%s", buf[:runtime.Stack(buf, true)])
	}
	if _, err := os.Stat(flags.Kubeconfig); !os.IsNotExist(err) {
		t.Errorf("kubeconfig left behind: %v", err)
	}
	if !strings.HasSuffix(out.String(), "Stopping.\n") {
		t.Errorf("output does not end with Stopping:\n%s", out.String())
	}
}

// TestDefaultSchedulerConfig: the built-in configuration is the one in
// examples/, which users deploy.
func TestDefaultSchedulerConfig(t *testing.T) {
	example, err := os.ReadFile(filepath.Join("..", "..", "examples", "gpusched-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if DefaultSchedulerConfig != string(example) {
		t.Error("internal/playground/scheduler-config.yaml differs from examples/gpusched-config.yaml: copy it over")
	}
	if names, err := profileNames(DefaultSchedulerConfig); err != nil || len(names) != 1 || names[0] != "gpusched" {
		t.Errorf("profiles %q, %v", names, err)
	}
}

// runDemoWith runs the demo with its default flags and the --config file
// configFile ("" for the built-in configuration), failing the test unless
// it settles within 3 minutes, and returns its options and output.
func runDemoWith(t *testing.T, configFile string) (Options, *bytes.Buffer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	flags := NewFlags()
	flags.Demo = true
	flags.ConfigFile = configFile
	opts, err := flags.Options()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := Run(ctx, opts, &out); err != nil {
		t.Fatalf("Run: %v\n%s", err, out.String())
	}
	return opts, &out
}
