package extender

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpusched/gpusched/pkg/gpu"
	gt "github.com/gpusched/gpusched/pkg/gpu/gputest"
)

const (
	a100 = "NVIDIA-A100-SXM4-80GB"
	t4   = "Tesla-T4"
)

// testExtender is an Extender over informers on a fake clientset whose
// pods/binding subresource behaves as the API server's (see bindReactor), and
// its HTTP handler.
type testExtender struct {
	ext     *Extender
	cluster *Cluster
	client  *fake.Clientset
	handler http.Handler
	ctx     context.Context
}

// newTestExtender starts informers over nodes and pods and waits until the
// cluster view holds them. policy nil means BestFit on GPU compute.
func newTestExtender(t testing.TB, policy *gpu.Policy, nodes []*v1.Node, pods []*v1.Pod) *testExtender {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	var objects []runtime.Object
	for _, n := range nodes {
		objects = append(objects, n)
	}
	for _, p := range pods {
		objects = append(objects, p)
	}
	client := fake.NewClientset(objects...)
	client.PrependReactor("create", "pods", bindReactor(client.Tracker()))
	factory := informers.NewSharedInformerFactory(client, 0)
	cluster, err := NewCluster(factory)
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	t.Cleanup(func() { cancel(); factory.Shutdown() })
	if !cache.WaitForCacheSync(ctx.Done(), cluster.HasSynced) {
		t.Fatal("informers did not sync")
	}
	if policy == nil {
		policy = gpu.MustPolicy(gpu.PolicyBestFit, gpu.PolicyConfig{})
	}
	ext := New(cluster, client, policy)
	return &testExtender{ext: ext, cluster: cluster, client: client, handler: NewHandler(ext, DefaultMaxRequestBytes, nil), ctx: ctx}
}

// bindReactor makes the fake clientset's pods/binding create act as the API
// server's: the Binding's UID must be the pod's (else Conflict), the pod must
// not be bound yet (else Conflict), and the pod gets spec.nodeName and the
// Binding's annotations in one update.
func bindReactor(tracker clienttesting.ObjectTracker) clienttesting.ReactionFunc {
	return func(action clienttesting.Action) (bool, runtime.Object, error) {
		create, ok := action.(clienttesting.CreateAction)
		if !ok || action.GetSubresource() != "binding" {
			return false, nil, nil
		}
		b := create.GetObject().(*v1.Binding)
		obj, err := tracker.Get(v1.SchemeGroupVersion.WithResource("pods"), b.Namespace, b.Name)
		if err != nil {
			return true, nil, err
		}
		pod := obj.(*v1.Pod).DeepCopy()
		podsGR := v1.Resource("pods")
		switch {
		case b.UID != "" && b.UID != pod.UID:
			return true, nil, apierrors.NewConflict(podsGR, b.Name, errString("Precondition failed: UID in precondition: "+string(b.UID)+", UID in object meta: "+string(pod.UID)))
		case pod.Spec.NodeName != "":
			return true, nil, apierrors.NewConflict(podsGR, b.Name, errString("pod "+b.Name+" is already assigned to node "+pod.Spec.NodeName))
		}
		pod.Spec.NodeName = b.Target.Name
		for k, v := range b.Annotations {
			if pod.Annotations == nil {
				pod.Annotations = map[string]string{}
			}
			pod.Annotations[k] = v
		}
		return true, nil, tracker.Update(v1.SchemeGroupVersion.WithResource("pods"), pod, pod.Namespace)
	}
}

type errString string

func (e errString) Error() string { return string(e) }

// bindings returns the Bindings the extender wrote, and the number of other
// writes (anything but get, list and watch).
func bindings(client *fake.Clientset) (out []*v1.Binding, otherWrites int) {
	for _, a := range client.Actions() {
		switch {
		case a.GetVerb() == "create" && a.GetSubresource() == "binding":
			out = append(out, a.(clienttesting.CreateAction).GetObject().(*v1.Binding))
		case a.GetVerb() != "get" && a.GetVerb() != "list" && a.GetVerb() != "watch":
			otherWrites++
		}
	}
	return out, otherWrites
}

// post sends body to the handler's verb and returns the recorded response.
func post(t testing.TB, h http.Handler, verb string, body any) *httptest.ResponseRecorder {
	t.Helper()
	var raw []byte
	switch b := body.(type) {
	case []byte:
		raw = b
	case string:
		raw = []byte(b)
	default:
		var err error
		if raw, err = json.Marshal(body); err != nil {
			t.Fatal(err)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/"+verb, bytes.NewReader(raw)))
	return rec
}

// call posts args to verb, expects 200 and decodes the answer into out.
func call(t testing.TB, h http.Handler, verb string, args, out any) {
	t.Helper()
	rec := post(t, h, verb, args)
	if rec.Code != http.StatusOK {
		t.Fatalf("%s: HTTP %d: %s", verb, rec.Code, rec.Body)
	}
	if err := json.Unmarshal(rec.Body.Bytes(), out); err != nil {
		t.Fatalf("%s: decoding the answer: %v", verb, err)
	}
}

// namesArgs is a nodeCacheCapable request.
func namesArgs(pod *v1.Pod, names ...string) *extenderv1.ExtenderArgs {
	return &extenderv1.ExtenderArgs{Pod: pod, NodeNames: &names}
}

// nodesArgs is a request with full Node objects.
func nodesArgs(pod *v1.Pod, nodes ...*v1.Node) *extenderv1.ExtenderArgs {
	list := &v1.NodeList{}
	for _, n := range nodes {
		list.Items = append(list.Items, *n)
	}
	return &extenderv1.ExtenderArgs{Pod: pod, Nodes: list}
}

// eventually polls cond for up to 5 s.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// bound is a pod bound to node with an assignment there.
func bound(name, node string, devices []int, milli, memory int64) *v1.Pod {
	return gt.MakeGPUPod(name).Node(node).Assigned(gpu.Assignment{Node: node, Devices: devices, Milli: milli, MemoryMiB: memory}).Obj()
}
