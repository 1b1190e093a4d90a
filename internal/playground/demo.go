package playground

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/gpusched/gpusched/examples/workloads"
	"github.com/gpusched/gpusched/pkg/gpu"
)

// DemoInference is the Deployment of examples/workloads the demo scales
// from its file's replicas to DemoInferenceReplicas while it runs.
const (
	DemoInference         = "inference"
	DemoInferenceReplicas = 6
)

// runDemo submits the demo's pods and, with the controllers and the
// --nodes shapes, the example workloads (examples/workloads); waits until every pod has settled and
// every Job has completed, scaling the inference Deployment up on the way;
// prints which pods waited and why as it goes; creates the bound pods'
// containers through their nodes' runtimes (where the node agents give them
// their GPUs), and writes the table.
func runDemo(ctx context.Context, client kubernetes.Interface, apply *applier, agents agents, opts Options, profiles []string, start time.Time, out io.Writer) error {
	schedulerName := profiles[0]
	// The example workloads are written for the default nodes (T4s, one
	// 8-GPU H100 node); a --nodes-from list need not have them.
	withWorkloads := opts.Controllers && len(opts.NodeList) == 0
	shapes := demoShapes(opts)
	pods := DemoPods(shapes, schedulerName)
	if withWorkloads {
		keepOffModel(pods, shapes, demoGangShape)
	}
	for _, p := range pods {
		if _, err := client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating pod %s: %w", p.Name, err)
		}
	}
	var applied []string
	var later []byte // the Workload API gang, submitted when the first gang is done
	if withWorkloads {
		names, files, err := workloads.Files()
		if err != nil {
			return err
		}
		firstGang := false // submitted now: the later gang waits for its Job
		for _, name := range names {
			if s := workloadScheduler(files[name]); s != "" && !slices.Contains(profiles, s) {
				// No profile would ever place its pods: the demo would not
				// settle.
				fmt.Fprintf(out, "Skipped examples/workloads/%s: its pods name scheduler %q, and this configuration's profiles are %s.\n",
					name, s, strings.Join(profiles, ", "))
				continue
			}
			if name == demoLaterWorkload {
				later = files[name]
				continue
			}
			firstGang = firstGang || name == demoFirstGangFile
			if err := apply.create(ctx, "examples/workloads/"+name, files[name]); err != nil {
				return err
			}
			applied = append(applied, name)
		}
		if later != nil && !firstGang {
			if err := apply.create(ctx, "examples/workloads/"+demoLaterWorkload, later); err != nil {
				return err
			}
			applied, later = append(applied, demoLaterWorkload), nil
		}
	}
	fmt.Fprintf(out, "Submitted %d pods", len(pods))
	if len(applied) > 0 {
		fmt.Fprintf(out, " and examples/workloads/{%s}", strings.Join(applied, ","))
	}
	fmt.Fprintln(out, ".")

	timeout := opts.DemoTimeout
	if timeout == 0 {
		timeout = 2 * time.Minute
	}
	w := &demoWait{client: client, out: out, start: start, said: map[string]bool{}, ready: map[string]bool{}}
	scaled := !withWorkloads
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		done, err := w.poll(ctx)
		if err == nil && later != nil && jobSucceeded(ctx, client, demoFirstGang) {
			if err := apply.create(ctx, "examples/workloads/"+demoLaterWorkload, later); err != nil {
				return false, err
			}
			fmt.Fprintf(out, "Job %s done; submitted examples/workloads/%s after %s.\n", demoFirstGang, demoLaterWorkload, since(start))
			later = nil
			return false, nil
		}
		if err != nil || scaled || !w.ready[DemoInference] {
			return done && scaled && later == nil, err
		}
		if err := scale(ctx, client, DemoInference, DemoInferenceReplicas); err != nil {
			return false, err
		}
		fmt.Fprintf(out, "Scaled deployment %s to %d replicas after %s.\n", DemoInference, DemoInferenceReplicas, since(start))
		scaled = true
		return false, nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("interrupted: %w", ctx.Err())
		}
		return fmt.Errorf("the demo did not settle within %v: %v; waiting for %s", timeout, err, w.waiting)
	}
	fmt.Fprintf(out, "First pod placed %s after start; all pods settled after %s.\n\n", w.firstPlaced.Round(10*time.Millisecond), since(start))
	current := demoOrder(w.pods, pods)
	return WriteTable(out, current, agents.devices(ctx, current))
}

// The demo submits the Workload API gang (demoLaterWorkload) once the
// training Job's gang (demoFirstGang) has finished: both ask for all eight
// H100s of one node, and two gang mechanisms that know nothing of each
// other can each hold part of the node until their timeouts.
const (
	demoLaterWorkload = "training-workload.yaml"
	demoFirstGangFile = "training-gang.yaml"
	demoFirstGang     = "train"
)

// schedulerNameLine finds the scheduler a workload file's pods name.
var schedulerNameLine = regexp.MustCompile(`(?m)^\s*schedulerName:\s*"?([^"\s#]+)"?`)

// workloadScheduler is the schedulerName in a workload file ("" for none).
func workloadScheduler(data []byte) string {
	if m := schedulerNameLine.FindSubmatch(data); m != nil {
		return string(m[1])
	}
	return ""
}

// demoGangShape is the --nodes model of the node the example workloads'
// gangs fill: each gang needs all eight of its GPUs.
const demoGangShape = "H100-80GB"

// keepOffModel restricts the demo's GPU pods that can fit somewhere
// (gpusched.io/gpu-models) to the models of shapes other than shape, so
// that none of them takes a GPU a gang of the example workloads needs all
// of: a demo pod that runs for ever on that node would keep the gang
// pending for ever. too-big, which fits nowhere, is left as it is.
func keepOffModel(pods []*v1.Pod, shapes []NodeShape, shape string) {
	var gang string
	var others []string
	for _, s := range shapes {
		switch {
		case s.Model == shape:
			gang = s.GPUModel()
		case !slices.Contains(others, s.GPUModel()):
			others = append(others, s.GPUModel())
		}
	}
	if gang == "" || len(others) == 0 {
		return
	}
	for _, p := range pods {
		d, err := gpu.DemandFromPod(p)
		if err != nil || d.IsZero() || p.Name == "too-big" {
			continue
		}
		allowed := slices.DeleteFunc(slices.Clone(d.Models), func(m string) bool { return m == gang })
		if len(allowed) == 0 {
			allowed = others
		}
		models(p, allowed...)
	}
}

// jobSucceeded reports whether the Job has completed.
func jobSucceeded(ctx context.Context, client kubernetes.Interface, name string) bool {
	job, err := client.BatchV1().Jobs(DemoNamespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return false
	}
	for _, c := range job.Status.Conditions {
		if c.Type == batchv1.JobComplete && c.Status == v1.ConditionTrue {
			return true
		}
	}
	return false
}

// demoWait tracks the demo's pods and workloads while the demo waits.
type demoWait struct {
	client      kubernetes.Interface
	out         io.Writer
	start       time.Time
	firstPlaced time.Duration
	said        map[string]bool // "<owner>: <message>" lines printed, digits left out
	ready       map[string]bool // Deployments with all their replicas ready
	pods        []*v1.Pod       // as last read
	waiting     string          // what is not done yet, for the error
}

// poll reads the pods, Jobs and Deployments of DemoNamespace, prints each
// new reason a pod waits for (once per owner and message), and reports
// whether every pod has settled, every Job has completed and every
// Deployment has all its replicas Running.
func (w *demoWait) poll(ctx context.Context) (bool, error) {
	list, err := w.client.CoreV1().Pods(DemoNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, nil // transient: read again
	}
	w.pods = w.pods[:0]
	var waiting []string
	for i := range list.Items {
		p := &list.Items[i]
		w.pods = append(w.pods, p)
		if p.Spec.NodeName != "" && w.firstPlaced == 0 {
			w.firstPlaced = time.Since(w.start)
		}
		if c := scheduledCondition(p); p.Spec.NodeName == "" && c != nil && c.Status == v1.ConditionFalse && c.Message != "" {
			owner := p.Name
			if ref := metav1.GetControllerOf(p); ref != nil {
				owner = strings.ToLower(ref.Kind) + " " + ref.Name
			}
			// Once per owner and reason: "has 3 of the 8 pods" and "has 4 of
			// the 8 pods" are one reason.
			if key := digits.ReplaceAllString(owner+": "+c.Message, "#"); !w.said[key] {
				w.said[key] = true
				fmt.Fprintf(w.out, "Waiting after %s: %s (pod %s): %s\n", since(w.start), owner, p.Name, c.Message)
			}
		}
		if !settled(p) {
			waiting = append(waiting, "pod "+p.Name)
		}
	}
	jobs, err := w.client.BatchV1().Jobs(DemoNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, nil
	}
	for _, j := range jobs.Items {
		if j.Spec.Completions != nil && j.Status.Succeeded < *j.Spec.Completions {
			waiting = append(waiting, fmt.Sprintf("job %s (%d of %d succeeded)", j.Name, j.Status.Succeeded, *j.Spec.Completions))
		}
	}
	deployments, err := w.client.AppsV1().Deployments(DemoNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, nil
	}
	w.ready = map[string]bool{}
	for _, d := range deployments.Items {
		want := replicasOf(&d)
		w.ready[d.Name] = d.Status.ReadyReplicas == want && d.Status.Replicas == want && d.Status.ObservedGeneration == d.Generation
		if !w.ready[d.Name] {
			waiting = append(waiting, fmt.Sprintf("deployment %s (%d of %d ready)", d.Name, d.Status.ReadyReplicas, want))
		}
	}
	w.waiting = strings.Join(waiting, ", ")
	return len(waiting) == 0, nil
}

var digits = regexp.MustCompile(`[0-9]+`)

func replicasOf(d *appsv1.Deployment) int32 {
	if d.Spec.Replicas == nil {
		return 1
	}
	return *d.Spec.Replicas
}

// scale sets a Deployment's replicas, as `kubectl scale` does.
func scale(ctx context.Context, client kubernetes.Interface, name string, replicas int32) error {
	s, err := client.AppsV1().Deployments(DemoNamespace).GetScale(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("scaling deployment %s: %w", name, err)
	}
	s.Spec.Replicas = replicas
	if _, err := client.AppsV1().Deployments(DemoNamespace).UpdateScale(ctx, name, s, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("scaling deployment %s: %w", name, err)
	}
	return nil
}

// demoOrder orders the pods for the table: DemoPods' in their order, then
// the workloads' by name (which starts with their owner's).
func demoOrder(pods []*v1.Pod, demo []*v1.Pod) []*v1.Pod {
	position := map[string]int{}
	for i, p := range demo {
		position[p.Name] = i
	}
	out := slices.Clone(pods)
	slices.SortStableFunc(out, func(a, b *v1.Pod) int {
		pa, aDemo := position[a.Name]
		pb, bDemo := position[b.Name]
		switch {
		case aDemo && bDemo:
			return pa - pb
		case aDemo:
			return -1
		case bDemo:
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}
