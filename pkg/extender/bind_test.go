package extender

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

func bindArgs(pod *v1.Pod, node string) *extenderv1.ExtenderBindingArgs {
	return &extenderv1.ExtenderBindingArgs{PodName: pod.Name, PodNamespace: pod.Namespace, PodUID: pod.UID, Node: node}
}

func TestBind(t *testing.T) {
	node := gt.MakeGPUNode("a100-0").GFD(a100, 2, 81920).Obj()
	share := bound("share", "a100-0", []int{1}, 300, 4096) // GPU 1: 300 milli, 4 GiB
	for _, tc := range []struct {
		name string
		pods []*v1.Pod // in the cluster besides share
		args func(pods []*v1.Pod) *extenderv1.ExtenderBindingArgs
		// wantErr is a part of the error; empty means success.
		wantErr string
		// wantBinding is the Binding's assignment annotation, "-" for a
		// Binding without annotations, "" for no write at all.
		wantBinding string
		wantResult  string // the binds metric's result
	}{{
		name: "a share goes to the tightest GPU, in one Binding with its assignment",
		pods: []*v1.Pod{gt.MakeGPUPod("p").Milli(500).GPUMemory("10Gi").Obj()},
		args: func(pods []*v1.Pod) *extenderv1.ExtenderBindingArgs { return bindArgs(pods[0], "a100-0") },
		// GPU 1 has 700 milli free, GPU 0 1000: best-fit takes GPU 1.
		wantBinding: "node=a100-0;gpus=1;milli=500;memory=10240",
		wantResult:  BindResultBound,
	}, {
		name:        "whole GPUs",
		pods:        []*v1.Pod{gt.MakeGPUPod("p").GPUs(1).Obj()},
		args:        func(pods []*v1.Pod) *extenderv1.ExtenderBindingArgs { return bindArgs(pods[0], "a100-0") },
		wantBinding: "node=a100-0;gpus=0;milli=1000;memory=0",
		wantResult:  BindResultBound,
	}, {
		name:        "a pod without GPU demand gets a plain Binding",
		pods:        []*v1.Pod{gt.MakeGPUPod("p").CPU("1").Obj()},
		args:        func(pods []*v1.Pod) *extenderv1.ExtenderBindingArgs { return bindArgs(pods[0], "a100-0") },
		wantBinding: "-",
		wantResult:  BindResultBound,
	}, {
		name: "a retry after success writes nothing",
		pods: []*v1.Pod{bound("p", "a100-0", []int{0}, 1000, 0)},
		args: func(pods []*v1.Pod) *extenderv1.ExtenderBindingArgs { return bindArgs(pods[0], "a100-0") },
		// The GPUs the pod holds are its own: no "no longer fits".
		wantResult: BindResultAlreadyBound,
	}, {
		name:       "a retry for a pod without GPUs writes nothing",
		pods:       []*v1.Pod{gt.MakeGPUPod("p").Node("a100-0").Obj()},
		args:       func(pods []*v1.Pod) *extenderv1.ExtenderBindingArgs { return bindArgs(pods[0], "a100-0") },
		wantResult: BindResultAlreadyBound,
	}, {
		name:       "bound to another node",
		pods:       []*v1.Pod{gt.MakeGPUPod("p").Node("other").Obj()},
		args:       func(pods []*v1.Pod) *extenderv1.ExtenderBindingArgs { return bindArgs(pods[0], "a100-0") },
		wantErr:    "already bound to node other",
		wantResult: BindResultError,
	}, {
		name:       "bound by someone else without an assignment",
		pods:       []*v1.Pod{gt.MakeGPUPod("p").GPUs(1).Node("a100-0").Obj()},
		args:       func(pods []*v1.Pod) *extenderv1.ExtenderBindingArgs { return bindArgs(pods[0], "a100-0") },
		wantErr:    "without a gpusched GPU assignment",
		wantResult: BindResultError,
	}, {
		name: "a replaced pod (another UID under the name) is not bound",
		pods: []*v1.Pod{gt.MakeGPUPod("p").GPUs(1).UID("uid-new").Obj()},
		args: func(pods []*v1.Pod) *extenderv1.ExtenderBindingArgs {
			a := bindArgs(pods[0], "a100-0")
			a.PodUID = "uid-old"
			return a
		},
		wantErr:    "pod default/p was replaced: it has UID uid-new, the scheduler placed UID uid-old",
		wantResult: BindResultError,
	}, {
		name: "a pod that is gone",
		args: func([]*v1.Pod) *extenderv1.ExtenderBindingArgs {
			return bindArgs(gt.MakeGPUPod("gone").Obj(), "a100-0")
		},
		wantErr:    `reading pod default/gone: pods "gone" not found`,
		wantResult: BindResultError,
	}, {
		name:       "GPUs taken since the filter",
		pods:       []*v1.Pod{gt.MakeGPUPod("p").GPUs(2).Obj()},
		args:       func(pods []*v1.Pod) *extenderv1.ExtenderBindingArgs { return bindArgs(pods[0], "a100-0") },
		wantErr:    "pod default/p (2 GPUs) no longer fits node a100-0: insufficient free GPUs",
		wantResult: BindResultError,
	}, {
		name:       "an unknown node",
		pods:       []*v1.Pod{gt.MakeGPUPod("p").GPUs(1).Obj()},
		args:       func(pods []*v1.Pod) *extenderv1.ExtenderBindingArgs { return bindArgs(pods[0], "ghost") },
		wantErr:    "node ghost: " + MsgUnknownNode,
		wantResult: BindResultError,
	}, {
		// Anyone who reaches the extender's API could otherwise have it bind
		// (and give GPUs to) a pod its scheduler never placed.
		name:       "a pod of another scheduler is not bound",
		pods:       []*v1.Pod{gt.MakeGPUPod("p").GPUs(1).SchedulerName("gpusched").Obj()},
		args:       func(pods []*v1.Pod) *extenderv1.ExtenderBindingArgs { return bindArgs(pods[0], "a100-0") },
		wantErr:    `pod default/p: its spec.schedulerName is "gpusched", and this extender binds only pods of default-scheduler (--scheduler-name)`,
		wantResult: BindResultError,
	}, {
		name:       "a malformed demand",
		pods:       []*v1.Pod{gt.MakeGPUPod("p").Annotation(gpu.AnnotationMilli, "half").Obj()},
		args:       func(pods []*v1.Pod) *extenderv1.ExtenderBindingArgs { return bindArgs(pods[0], "a100-0") },
		wantErr:    `invalid gpusched.io/gpu-milli "half"`,
		wantResult: BindResultError,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			te := newTestExtender(t, nil, []*v1.Node{node}, append([]*v1.Pod{share}, tc.pods...))
			var results []string
			te.ext.onBind = func(r string) { results = append(results, r) }
			te.client.ClearActions()
			args := tc.args(tc.pods)

			var r extenderv1.ExtenderBindingResult
			call(t, te.handler, VerbBind, args, &r)
			if tc.wantErr == "" && r.Error != "" || !strings.Contains(r.Error, tc.wantErr) {
				t.Fatalf("error %q, want %q", r.Error, tc.wantErr)
			}
			if len(results) != 1 || results[0] != tc.wantResult {
				t.Errorf("bind results %v, want [%s]", results, tc.wantResult)
			}
			written, other := bindings(te.client)
			if other != 0 {
				t.Errorf("%d writes besides Bindings: %v", other, te.client.Actions())
			}
			switch {
			case tc.wantBinding == "" && len(written) != 0:
				t.Fatalf("wrote %d Bindings, want none", len(written))
			case tc.wantBinding == "":
				return
			case len(written) != 1:
				t.Fatalf("wrote %d Bindings, want exactly one", len(written))
			}
			b := written[0]
			if b.Name != args.PodName || b.Namespace != args.PodNamespace || b.UID != args.PodUID || b.Target.Name != "a100-0" {
				t.Errorf("Binding %s/%s UID %s to %s, want the pod's UID and node a100-0", b.Namespace, b.Name, b.UID, b.Target.Name)
			}
			if got := b.Annotations[gpu.AnnotationAssigned]; tc.wantBinding == "-" && len(b.Annotations) != 0 || tc.wantBinding != "-" && got != tc.wantBinding {
				t.Errorf("Binding annotations %v, want assignment %q", b.Annotations, tc.wantBinding)
			}
			if tc.wantBinding == "-" {
				return
			}
			// The pod is held on the node at once, with its assignment; the
			// informer's bound pod replaces the held copy.
			if held, ok := te.cluster.BoundPod(args.PodUID); !ok || held.Annotations[gpu.AnnotationAssigned] != tc.wantBinding {
				t.Errorf("pod not held on the node with its assignment: %v", held)
			}
			eventually(t, "the informer's bound pod", func() bool {
				p, _ := te.cluster.BoundPod(args.PodUID)
				informed, _ := te.cluster.PodLister().Pods(args.PodNamespace).Get(args.PodName)
				return p != nil && p == informed && p.Annotations[gpu.AnnotationAssigned] == tc.wantBinding
			})
		})
	}
}

// TestBindFailureReleases: when the API server refuses the Binding (an API
// status in 4xx: nothing was written), the GPUs are released at once, and
// the next pod gets them.
func TestBindFailureReleases(t *testing.T) {
	node := gt.MakeGPUNode("a100-0").GFD(a100, 1, 81920).Obj()
	first, second := gt.MakeGPUPod("first").GPUs(1).Obj(), gt.MakeGPUPod("second").GPUs(1).Obj()
	te := newTestExtender(t, nil, []*v1.Node{node}, []*v1.Pod{first, second})
	refuse := true
	te.client.PrependReactor("create", "pods", func(action clienttesting.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() == "binding" && refuse {
			return true, nil, apierrors.NewForbidden(v1.Resource("pods/binding"), "first", errors.New("etcd is on fire"))
		}
		return false, nil, nil
	})
	r := te.ext.Bind(te.ctx, bindArgs(first, "a100-0"))
	if !strings.Contains(r.Error, "etcd is on fire") {
		t.Fatalf("error %q", r.Error)
	}
	if _, held := te.cluster.BoundPod(first.UID); held {
		t.Error("a pod whose Binding failed is still held on the node")
	}
	if _, assumed := te.ext.ledger.Assumed(first.UID); assumed {
		t.Error("the GPUs of a pod whose Binding failed are still assumed")
	}
	refuse = false
	if r := te.ext.Bind(te.ctx, bindArgs(second, "a100-0")); r.Error != "" {
		t.Fatalf("second pod: %s", r.Error)
	}
}

// TestConcurrentBindsGiveNoGPUTwice: binds racing for the GPUs of one node
// get them one pod each; the others fail and are retried by the scheduler.
func TestConcurrentBindsGiveNoGPUTwice(t *testing.T) {
	node := gt.MakeGPUNode("a100-0").GFD(a100, 4, 81920).Obj()
	var pods []*v1.Pod
	for _, name := range []string{"p0", "p1", "p2", "p3", "p4", "p5", "p6", "p7"} {
		pods = append(pods, gt.MakeGPUPod(name).Milli(600).Obj())
	}
	te := newTestExtender(t, nil, []*v1.Node{node}, pods)
	var wg sync.WaitGroup
	errs := make([]string, len(pods))
	for i, p := range pods {
		wg.Go(func() { errs[i] = te.ext.Bind(te.ctx, bindArgs(p, "a100-0")).Error })
	}
	wg.Wait()
	used := map[int]int64{}
	succeeded := 0
	for i, p := range pods {
		if errs[i] != "" {
			if !strings.Contains(errs[i], "no longer fits") {
				t.Errorf("%s: %s", p.Name, errs[i])
			}
			continue
		}
		succeeded++
		got, err := te.client.CoreV1().Pods("default").Get(context.Background(), p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		a, ok := gpu.AssignmentOf(got)
		if !ok {
			t.Fatalf("%s bound without an assignment", p.Name)
		}
		used[a.Devices[0]] += a.Milli
	}
	// 600 milli each: one pod per GPU, 4 GPUs.
	if succeeded != 4 {
		t.Errorf("%d binds succeeded, want 4: %v", succeeded, errs)
	}
	for gpuIndex, milli := range used {
		if milli > gpu.MilliPerGPU {
			t.Errorf("GPU %d given %d milli-GPU", gpuIndex, milli)
		}
	}
}

func TestPreempt(t *testing.T) {
	nodes := []*v1.Node{
		gt.MakeGPUNode("p-0").GFD(a100, 2, 81920).Obj(),
		gt.MakeGPUNode("p-1").GFD(a100, 2, 81920).Obj(),
	}
	v1w, v2s, v3w := bound("v1", "p-0", []int{0}, 1000, 0), bound("v2", "p-0", []int{1}, 500, 0), bound("v3", "p-1", []int{0}, 1000, 0)
	te := newTestExtender(t, nil, nodes, []*v1.Pod{v1w, v2s, v3w})
	meta := func(pods ...*v1.Pod) *extenderv1.MetaVictims {
		mv := &extenderv1.MetaVictims{Pods: []*extenderv1.MetaPod{}, NumPDBViolations: 1}
		for _, p := range pods {
			mv.Pods = append(mv.Pods, &extenderv1.MetaPod{UID: string(p.UID)})
		}
		return mv
	}
	full := func(pods ...*v1.Pod) *extenderv1.Victims { return &extenderv1.Victims{Pods: pods, NumPDBViolations: 1} }
	two := gt.MakeGPUPod("two").GPUs(2).Obj()

	for _, tc := range []struct {
		name string
		args *extenderv1.ExtenderPreemptionArgs
		want map[string]*extenderv1.MetaVictims
	}{{
		// p-0 without v1 still has v2's share on GPU 1; p-1 without v3 is idle.
		name: "a node is kept only if the victims free enough GPUs",
		args: &extenderv1.ExtenderPreemptionArgs{Pod: two, NodeNameToMetaVictims: map[string]*extenderv1.MetaVictims{"p-0": meta(v1w), "p-1": meta(v3w)}},
		want: map[string]*extenderv1.MetaVictims{"p-1": meta(v3w)},
	}, {
		name: "every victim of p-0",
		args: &extenderv1.ExtenderPreemptionArgs{Pod: two, NodeNameToMetaVictims: map[string]*extenderv1.MetaVictims{"p-0": meta(v1w, v2s)}},
		want: map[string]*extenderv1.MetaVictims{"p-0": meta(v1w, v2s)},
	}, {
		name: "full victims (nodeCacheCapable: false) come back by UID",
		args: &extenderv1.ExtenderPreemptionArgs{Pod: two, NodeNameToVictims: map[string]*extenderv1.Victims{"p-0": full(v1w), "p-1": full(v3w)}},
		want: map[string]*extenderv1.MetaVictims{"p-1": meta(v3w)},
	}, {
		name: "an unknown node is dropped",
		args: &extenderv1.ExtenderPreemptionArgs{Pod: two, NodeNameToMetaVictims: map[string]*extenderv1.MetaVictims{"ghost": meta(v1w), "p-1": meta(v3w)}},
		want: map[string]*extenderv1.MetaVictims{"p-1": meta(v3w)},
	}, {
		name: "a pod without GPU demand keeps every node",
		args: &extenderv1.ExtenderPreemptionArgs{Pod: gt.MakeGPUPod("cpu").CPU("1").Obj(), NodeNameToMetaVictims: map[string]*extenderv1.MetaVictims{"p-0": meta(v1w)}},
		want: map[string]*extenderv1.MetaVictims{"p-0": meta(v1w)},
	}, {
		name: "a malformed demand keeps none",
		args: &extenderv1.ExtenderPreemptionArgs{Pod: gt.MakeGPUPod("bad").Annotation(gpu.AnnotationMilli, "x").Obj(), NodeNameToMetaVictims: map[string]*extenderv1.MetaVictims{"p-0": meta(v1w, v2s)}},
		want: map[string]*extenderv1.MetaVictims{},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var got extenderv1.ExtenderPreemptionResult
			call(t, te.handler, VerbPreempt, tc.args, &got)
			if len(got.NodeNameToMetaVictims) != len(tc.want) {
				t.Fatalf("kept %v, want %v", keys(got.NodeNameToMetaVictims), keys(tc.want))
			}
			for name, want := range tc.want {
				g := got.NodeNameToMetaVictims[name]
				if g == nil || g.NumPDBViolations != want.NumPDBViolations || len(g.Pods) != len(want.Pods) {
					t.Fatalf("node %s: victims %+v, want %+v", name, g, want)
				}
				for i := range want.Pods {
					if g.Pods[i].UID != want.Pods[i].UID {
						t.Errorf("node %s victim %d: %s, want %s", name, i, g.Pods[i].UID, want.Pods[i].UID)
					}
				}
			}
		})
	}
	// The what-ifs left the real view alone: p-0 is still full for two GPUs.
	var r extenderv1.ExtenderFilterResult
	call(t, te.handler, VerbFilter, namesArgs(two, "p-0"), &r)
	if r.FailedNodes["p-0"] != "insufficient free GPUs" {
		t.Errorf("after preempt, filter of p-0: %+v", r)
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestBindIsOneWrite checks the API server's side of the single write: the
// held copy and the informer's pod carry the same assignment, and the pod's
// UID travels in the Binding, so a replaced pod fails the write itself.
func TestBindIsOneWrite(t *testing.T) {
	node := gt.MakeGPUNode("a100-0").GFD(a100, 1, 81920).Obj()
	pod := gt.MakeGPUPod("p").GPUs(1).Obj()
	te := newTestExtender(t, nil, []*v1.Node{node}, []*v1.Pod{pod})
	// Between the read and the write the pod is replaced: the write must fail.
	te.client.PrependReactor("create", "pods", func(action clienttesting.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() == "binding" {
			b := action.(clienttesting.CreateAction).GetObject().(*v1.Binding)
			if b.UID != types.UID("uid-p") {
				t.Errorf("Binding UID %q, want the pod's", b.UID)
			}
			replaced := pod.DeepCopy()
			replaced.UID = "uid-p2"
			_ = te.client.Tracker().Update(v1.SchemeGroupVersion.WithResource("pods"), replaced, "default")
		}
		return false, nil, nil
	})
	r := te.ext.Bind(te.ctx, bindArgs(pod, "a100-0"))
	if !strings.Contains(r.Error, "Precondition failed") {
		t.Fatalf("bind of a pod replaced meanwhile: %q", r.Error)
	}
	if _, held := te.cluster.BoundPod(pod.UID); held {
		t.Error("the replaced pod is still held")
	}
}

// TestBindRetryWhileWriting: a retry that arrives while the first bind is
// still writing its Binding is refused (the write may fail yet); once the
// write is done, a retry succeeds without writing.
func TestBindRetryWhileWriting(t *testing.T) {
	node := gt.MakeGPUNode("a100-0").GFD(a100, 1, 81920).Obj()
	pod := gt.MakeGPUPod("p").GPUs(1).Obj()
	te := newTestExtender(t, nil, []*v1.Node{node}, []*v1.Pod{pod})
	writing, proceed := make(chan struct{}), make(chan struct{})
	te.client.PrependReactor("create", "pods", func(action clienttesting.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() == "binding" {
			close(writing)
			<-proceed
		}
		return false, nil, nil
	})
	first := make(chan string)
	go func() { first <- te.ext.Bind(te.ctx, bindArgs(pod, "a100-0")).Error }()
	<-writing
	if r := te.ext.Bind(te.ctx, bindArgs(pod, "a100-0")); !strings.Contains(r.Error, "in flight") {
		t.Errorf("retry during the write: %q, want in flight", r.Error)
	}
	close(proceed)
	if err := <-first; err != "" {
		t.Fatalf("first bind: %s", err)
	}
	var results []string
	te.ext.onBind = func(r string) { results = append(results, r) }
	if r := te.ext.Bind(te.ctx, bindArgs(pod, "a100-0")); r.Error != "" || len(results) != 1 || results[0] != BindResultAlreadyBound {
		t.Errorf("retry after the write: %q %v, want already bound", r.Error, results)
	}
	if written, _ := bindings(te.client); len(written) != 1 {
		t.Errorf("%d Bindings written, want 1", len(written))
	}
}

// TestBindWaitsForSync: an instance that has not yet read every node and
// pod (a replica that has just won the Lease) refuses binds, since a GPU
// held by a pod it has not read would look free.
func TestBindWaitsForSync(t *testing.T) {
	node := gt.MakeGPUNode("n").GFD(a100, 1, 81920).Obj()
	pod := gt.MakeGPUPod("p").GPUs(1).Obj()
	client := fake.NewClientset(node, pod)
	cluster, err := NewCluster(informers.NewSharedInformerFactory(client, 0)) // never started
	if err != nil {
		t.Fatal(err)
	}
	ext := New(cluster, client, gpu.MustPolicy(gpu.PolicyBestFit, gpu.PolicyConfig{}))
	got := ext.Bind(context.Background(), &extenderv1.ExtenderBindingArgs{PodName: "p", PodNamespace: pod.Namespace, PodUID: pod.UID, Node: "n"})
	if !strings.Contains(got.Error, "has not read every node and pod") {
		t.Errorf("bind before sync: %q, want a refusal", got.Error)
	}
}

// TestBindOutcomeUnknown: the Binding's write fails and the pod cannot be
// read either (the API server is restarting), so whether the pod was bound
// is unknown. Its GPU must stay held, refusing another pod, until a read
// shows the pod unbound; then the GPU is free again.
func TestBindOutcomeUnknown(t *testing.T) {
	node := gt.MakeGPUNode("a100-0").GFD(a100, 1, 81920).Obj()
	p, q := gt.MakeGPUPod("p").GPUs(1).Obj(), gt.MakeGPUPod("q").GPUs(1).Obj()
	te := newTestExtender(t, nil, []*v1.Node{node}, []*v1.Pod{p, q})
	te.ext.settleAfter = 0
	var apiDown atomic.Bool
	apiDown.Store(true)
	te.client.PrependReactor("create", "pods", func(action clienttesting.Action) (bool, runtime.Object, error) {
		b, ok := action.(clienttesting.CreateAction).GetObject().(*v1.Binding)
		if ok && b.Name == "p" && apiDown.Load() {
			return true, nil, errors.New("unexpected EOF")
		}
		return false, nil, nil
	})
	te.client.PrependReactor("get", "pods", func(clienttesting.Action) (bool, runtime.Object, error) {
		if apiDown.Load() {
			return true, nil, errors.New("connection refused")
		}
		return false, nil, nil
	})
	if r := te.ext.Bind(te.ctx, bindArgs(p, "a100-0")); r.Error == "" {
		t.Fatal("the bind of p succeeded through a failing write")
	}
	if r := te.ext.Bind(te.ctx, bindArgs(q, "a100-0")); !strings.Contains(r.Error, "no longer fits") {
		t.Fatalf("q bound to the GPU held for p, whose bind's outcome is unknown: %q", r.Error)
	}
	apiDown.Store(false) // p reads as unbound: its GPU is released
	err := wait.PollUntilContextTimeout(te.ctx, 100*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return te.ext.Bind(te.ctx, bindArgs(q, "a100-0")).Error == "", nil
	})
	if err != nil {
		t.Fatalf("q never bound after p was read unbound: %v", err)
	}
}

// TestBindUncertainWriteHeldUntilSettled: the Binding's write times out (a
// 504: the API server may still commit it) while reads work and find the
// pod unbound. The GPU must stay held, refusing another pod, until a read
// made settleAfter after the write ended; then it is free again. A write
// refused with a 403 frees it at once (TestBindFailureReleases).
func TestBindUncertainWriteHeldUntilSettled(t *testing.T) {
	node := gt.MakeGPUNode("a100-0").GFD(a100, 1, 81920).Obj()
	p, q := gt.MakeGPUPod("p").GPUs(1).Obj(), gt.MakeGPUPod("q").GPUs(1).Obj()
	te := newTestExtender(t, nil, []*v1.Node{node}, []*v1.Pod{p, q})
	const settleAfter = time.Second
	te.ext.settleAfter = settleAfter
	te.client.PrependReactor("create", "pods", func(action clienttesting.Action) (bool, runtime.Object, error) {
		if b, ok := action.(clienttesting.CreateAction).GetObject().(*v1.Binding); ok && b.Name == "p" {
			return true, nil, apierrors.NewTimeoutError("the request was not finished in time", 0)
		}
		return false, nil, nil
	})
	if r := te.ext.Bind(te.ctx, bindArgs(p, "a100-0")); r.Error == "" {
		t.Fatal("the bind of p succeeded through a write that timed out")
	}
	ended := time.Now()
	if r := te.ext.Bind(te.ctx, bindArgs(q, "a100-0")); !strings.Contains(r.Error, "no longer fits") {
		t.Fatalf("q bound to the GPU of p, whose write may still commit: %q", r.Error)
	}
	err := wait.PollUntilContextTimeout(te.ctx, 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return te.ext.Bind(te.ctx, bindArgs(q, "a100-0")).Error == "", nil
	})
	if err != nil {
		t.Fatalf("q never bound after p's write was settled: %v", err)
	}
	if took := time.Since(ended); took < settleAfter {
		t.Errorf("the GPU of p was released %v after its write ended, before settleAfter %v", took, settleAfter)
	}
}

// TestBindFencedByLease: with leader election a bind's API calls end by the
// fence, the last renewal's send time plus the renew deadline, not
// bindTimeout later; within minBindWindow of the fence, and once the lease
// is released, no bind starts.
func TestBindFencedByLease(t *testing.T) {
	node := gt.MakeGPUNode("a100-0").GFD(a100, 1, 81920).Obj()
	p := gt.MakeGPUPod("p").GPUs(1).Obj()
	te := newTestExtender(t, nil, []*v1.Node{node}, []*v1.Pod{p})
	const renewDeadline = 3 * time.Second
	lock := &fence{
		Interface: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: "kube-system", Name: "gpusched-extender"},
			Client:     te.client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: "me"},
		},
		renewDeadline: renewDeadline,
	}
	te.ext.bindOnlyWhileLeading(lock)
	te.ext.setLeading(true)
	if te.ext.mayBind() {
		t.Fatal("binds before the lease was ever written")
	}
	sent := time.Now()
	if err := lock.Create(te.ctx, resourcelock.LeaderElectionRecord{HolderIdentity: "me", LeaseDurationSeconds: 5}); err != nil {
		t.Fatal(err)
	}
	until := lock.until()
	if until.Before(sent.Add(renewDeadline)) || until.After(time.Now().Add(renewDeadline)) {
		t.Fatalf("fence %v, want the renewal's send time %v plus %v", until, sent, renewDeadline)
	}
	if d := te.ext.bindDeadline(time.Now()); !d.Equal(until) {
		t.Errorf("bind deadline %v, want the fence %v (bindTimeout %v is later)", d, until, bindTimeout)
	}
	if !te.ext.mayBind() {
		t.Error("the leader with its fence ahead may not bind")
	}
	// A release of the lease (a write naming no holder, or another) lifts
	// the fence at once, then waits for the bind in flight before writing.
	if !te.ext.enterBind() {
		t.Fatal("no bind may start under a valid fence")
	}
	released := make(chan error, 1)
	go func() {
		released <- lock.Update(te.ctx, resourcelock.LeaderElectionRecord{HolderIdentity: "", LeaseDurationSeconds: 1})
	}()
	select {
	case err := <-released:
		t.Fatalf("the lease was released (%v) while a bind was in flight", err)
	case <-time.After(200 * time.Millisecond):
	}
	if te.ext.mayBind() {
		t.Error("a bind may start while the lease is being released")
	}
	te.ext.leaveBind()
	if err := <-released; err != nil {
		t.Fatal(err)
	}
	if !lock.until().IsZero() || te.ext.mayBind() {
		t.Errorf("after the release: fence %v, mayBind %v; want none", lock.until(), te.ext.mayBind())
	}
	if r := te.ext.Bind(te.ctx, bindArgs(p, "a100-0")); !strings.Contains(r.Error, "does not hold the leader lease") {
		t.Errorf("bind after the release: %q, want a refusal", r.Error)
	}
	// A fence less than minBindWindow ahead starts no bind.
	lock.mu.Lock()
	lock.expires = time.Now().Add(minBindWindow / 2)
	lock.mu.Unlock()
	if te.ext.mayBind() {
		t.Errorf("a bind may start %v before the fence", minBindWindow/2)
	}
}

// TestBindConflictOfItsOwnWrite: the write is stored but its answer is a
// 409 (client-go sent it again after a lost answer, and the resend found
// the pod assigned). That is no refusal: the extender reads the pod, finds
// it bound with its assignment, and reports the bind done.
func TestBindConflictOfItsOwnWrite(t *testing.T) {
	node := gt.MakeGPUNode("a100-0").GFD(a100, 1, 81920).Obj()
	p := gt.MakeGPUPod("p").GPUs(1).Obj()
	te := newTestExtender(t, nil, []*v1.Node{node}, []*v1.Pod{p})
	store := bindReactor(te.client.Tracker())
	te.client.PrependReactor("create", "pods", func(action clienttesting.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() != "binding" {
			return false, nil, nil
		}
		if _, _, err := store(action); err != nil {
			t.Fatal(err)
		}
		return true, nil, apierrors.NewConflict(v1.Resource("pods/binding"), "p", errors.New("pod p is already assigned to node \"a100-0\""))
	})
	if r := te.ext.Bind(te.ctx, bindArgs(p, "a100-0")); r.Error != "" {
		t.Fatalf("a bind whose write was stored, answered 409: %q, want success", r.Error)
	}
}
