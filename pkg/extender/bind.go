package extender

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// Bind results, the values of the binds metric's result label.
const (
	BindResultBound        = "bound"
	BindResultAlreadyBound = "already-bound"
	BindResultError        = "error"
)

// bindTimeout bounds the API calls of one bind; with leader election the
// fence may end them sooner (leader.go). They do not end with the request:
// once the binding is written, the scheduler learns of it from its informer
// even if it stopped waiting for the answer.
const bindTimeout = 30 * time.Second

// DefaultBindSettleAfter is the engine's (gpu.DefaultBindSettleAfter), the
// default of --bind-settle-after.
const DefaultBindSettleAfter = gpu.DefaultBindSettleAfter

// Bind binds the pod to the node, giving it GPUs.
//
// It reads the pod (the UID must match: a pod deleted and recreated under the
// same name is not bound, "pod was replaced"), chooses its GPUs on the node
// from the ledger view as Filter and Prioritize saw it, assumes them, and
// binds with one write: a Binding that carries the gpusched.io/gpu-assigned
// annotation, which the API server copies onto the pod in the same update
// that sets spec.nodeName, so a bound pod never lacks its assignment. The
// Binding names the pod's UID, so the write fails if the pod was replaced
// meanwhile. A pod without GPU demand gets a plain Binding.
//
// Bind is idempotent: when the pod is already bound to the node with an
// assignment for it (or needs no GPUs), it succeeds without writing. Bound
// elsewhere, or without an assignment, it fails. With leader election, an
// instance that does not hold the lease fails every bind (errNotLeader), and
// the leader's API calls end by its fence.
//
// A write that fails in a way that leaves open whether the API server bound
// the pod (a timeout, a lost connection, a server error) keeps its GPUs held
// in doubt, whatever a read right after says, until a read made
// settleAfter after the write ended finds the pod unbound: until then
// the write may still commit.
func (e *Extender) Bind(ctx context.Context, args *extenderv1.ExtenderBindingArgs) *extenderv1.ExtenderBindingResult {
	ctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), e.bindDeadline(time.Now()))
	defer cancel()
	result, err := e.bind(ctx, args)
	if e.onBind != nil {
		e.onBind(result)
	}
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Bind failed", "err", err)
		return &extenderv1.ExtenderBindingResult{Error: err.Error()}
	}
	return &extenderv1.ExtenderBindingResult{}
}

func (e *Extender) bind(ctx context.Context, args *extenderv1.ExtenderBindingArgs) (string, error) {
	logger := klog.FromContext(ctx)
	if !e.enterBind() {
		return BindResultError, errNotLeader
	}
	defer e.leaveBind()
	if !e.cluster.HasSynced() {
		// Binds choose GPUs from the view of every node's pods: before the
		// initial lists are in, a GPU held by a pod not yet read would look
		// free. A new leader may win the Lease before its lists arrive.
		return BindResultError, errNotSynced
	}
	pod, err := e.podToBind(ctx, args)
	if err != nil {
		return BindResultError, err
	}
	if name := schedulerNameOf(pod); !slices.Contains(e.schedulerNames, name) {
		return BindResultError, fmt.Errorf("pod %s/%s: its spec.schedulerName is %q, and this extender binds only pods of %s (--scheduler-name): "+
			"a scheduler that does not call it did not place the pod", pod.Namespace, pod.Name, name, strings.Join(e.schedulerNames, ", "))
	}
	if pod.Spec.NodeName != "" {
		if err := alreadyBound(pod, args.Node); err != nil {
			return BindResultError, err
		}
		logger.V(2).Info("Pod already bound", "node", args.Node)
		return BindResultAlreadyBound, nil
	}
	demand, err := e.policy.Demand(pod)
	if err != nil {
		return BindResultError, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	if demand.IsZero() {
		if err := e.writeBinding(ctx, args, nil); err != nil {
			return BindResultError, err
		}
		logger.V(2).Info("Bound pod", "node", args.Node)
		return BindResultBound, nil
	}

	a, held, err := e.assume(pod, &demand, args.Node)
	if err != nil {
		return BindResultError, err
	}
	defer e.inFlight.Delete(pod.UID)
	if err := e.writeBinding(ctx, args, &a); err != nil {
		// client-go may have sent the write again until now: the settle
		// clock starts when the last attempt ended.
		notBefore := time.Now().Add(e.settleAfter)
		if !gpu.BindRefused(err) {
			if e.boundAnyway(ctx, args, &a) {
				logger.V(2).Info("Bound pod; the API server's answer was lost", "node", args.Node, "assignment", a.String(), "err", err)
				return BindResultBound, nil
			}
			// The binding may have been written, or may still be: its
			// GPUs stay held until a read made once it can no longer
			// commit says.
			logger.V(2).Info("Bind failed with its outcome unknown; its GPUs stay held until it is settled", "node", args.Node, "err", err,
				"settleAfter", e.settleAfter)
			e.ledger.Doubt(pod.UID)
			go e.settleBind(gpu.BindInDoubt{UID: pod.UID, Assignment: a, NotBefore: notBefore}, args)
		}
		e.cluster.Release(held)
		e.ledger.Forget(pod.UID)
		return BindResultError, err
	}
	logger.V(2).Info("Bound pod", "node", args.Node, "assignment", a.String())
	return BindResultBound, nil
}

// schedulerNameOf is the pod's scheduler, as the API server defaults it.
func schedulerNameOf(pod *v1.Pod) string {
	if pod.Spec.SchedulerName == "" {
		return v1.DefaultSchedulerName
	}
	return pod.Spec.SchedulerName
}

// podToBind returns the pod the scheduler asks to bind: the copy the
// extender holds on a node (it is bound; while its Binding is being written,
// errInFlight), else the informer's, else the API server's when the informer
// does not have it or has another pod under the name.
func (e *Extender) podToBind(ctx context.Context, args *extenderv1.ExtenderBindingArgs) (*v1.Pod, error) {
	if pod, ok := e.cluster.BoundPod(args.PodUID); ok {
		if _, writing := e.inFlight.Load(args.PodUID); writing {
			return nil, fmt.Errorf("pod %s/%s: %w", args.PodNamespace, args.PodName, errInFlight)
		}
		return pod, nil
	}
	var pod *v1.Pod
	if lister := e.cluster.PodLister(); lister != nil {
		pod, _ = lister.Pods(args.PodNamespace).Get(args.PodName)
	}
	if pod == nil || pod.UID != args.PodUID {
		var err error
		pod, err = e.client.CoreV1().Pods(args.PodNamespace).Get(ctx, args.PodName, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("reading pod %s/%s: %w", args.PodNamespace, args.PodName, err)
		}
	}
	if pod.UID != args.PodUID {
		return nil, fmt.Errorf("pod %s/%s was replaced: it has UID %s, the scheduler placed UID %s", args.PodNamespace, args.PodName, pod.UID, args.PodUID)
	}
	return pod, nil
}

// alreadyBound returns nil if a bound pod is bound as a bind to node would
// have left it: to that node, with an assignment for it if it needs GPUs.
func alreadyBound(pod *v1.Pod, node string) error {
	if pod.Spec.NodeName != node {
		return fmt.Errorf("pod %s/%s is already bound to node %s", pod.Namespace, pod.Name, pod.Spec.NodeName)
	}
	if d, err := gpu.DemandFromPod(pod); err == nil && d.IsZero() {
		return nil
	}
	if a, ok := gpu.AssignmentOf(pod); ok && a.Node == node {
		return nil
	}
	return fmt.Errorf("pod %s/%s is bound to node %s without a gpusched GPU assignment", pod.Namespace, pod.Name, node)
}

// errInFlight: a bind of the pod is writing its Binding; whether it will
// succeed is not known yet.
var errInFlight = errors.New("a bind of this pod is in flight, retry")

// errNotHeld: the informer reported the pod bound while the extender was
// choosing its GPUs; someone else bound it.
var errNotHeld = errors.New("pod was bound by someone else meanwhile")

// assume chooses the pod's GPUs on the node, assumes them in the ledger and
// holds the pod, with spec.nodeName and its assignment, on the node in the
// cluster view, all under bindMu: from then on every read of the node counts
// these GPUs as taken. It returns the assignment and the held copy.
func (e *Extender) assume(pod *v1.Pod, demand *gpu.Demand, node string) (gpu.Assignment, *v1.Pod, error) {
	e.bindMu.Lock()
	defer e.bindMu.Unlock()
	state := e.cluster.Node(node)
	if state == nil || state.Node == nil {
		return gpu.Assignment{}, nil, fmt.Errorf("binding pod %s/%s: node %s: %s", pod.Namespace, pod.Name, node, MsgUnknownNode)
	}
	if e.cluster.DRAManaged(node) {
		return gpu.Assignment{}, nil, fmt.Errorf("pod %s/%s (%s) no longer fits node %s: %s", pod.Namespace, pod.Name, demand, node, gpu.ReasonDRAManaged)
	}
	n := e.ledger.Node(state.Node, state.Generation, state.PodSeq())
	var taken *gpu.Reservation // a reservation the pod takes on node
	if e.reservedFor(pod, demand).Has(node) {
		n, taken = n.ForPod(pod, demand, e.ledger.HoldsReservation)
	}
	req := gpu.Request{Demand: demand, Host: hostOf(state, e.cluster.maxima())}
	chosen, fit := e.policy.PlaceReserved(n, &req, taken)
	if !fit.OK() {
		return gpu.Assignment{}, nil, fmt.Errorf("pod %s/%s (%s) no longer fits node %s: %s", pod.Namespace, pod.Name, demand, node, fit.Reasons)
	}
	a := gpu.NewAssignment(n, demand, chosen)
	var err error
	if taken != nil {
		err = e.ledger.AssumeReserved(pod.UID, a, taken.ID)
	} else {
		err = e.ledger.Assume(pod.UID, a)
	}
	if err != nil {
		return gpu.Assignment{}, nil, fmt.Errorf("assuming GPUs for pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	held := pod.DeepCopy()
	held.Spec.NodeName = node
	if held.Annotations == nil {
		held.Annotations = map[string]string{}
	}
	held.Annotations[gpu.AnnotationAssigned] = a.String()
	e.inFlight.Store(pod.UID, struct{}{})
	if !e.cluster.Hold(held) {
		e.inFlight.Delete(pod.UID)
		e.ledger.Forget(pod.UID)
		return gpu.Assignment{}, nil, fmt.Errorf("binding pod %s/%s: %w", pod.Namespace, pod.Name, errNotHeld)
	}
	return a, held, nil
}

// writeBinding binds the pod with one write; a non-nil assignment travels in
// the Binding's annotations, which the API server copies onto the pod
// atomically with spec.nodeName. The Binding's UID makes the write fail if
// the pod was replaced.
func (e *Extender) writeBinding(ctx context.Context, args *extenderv1.ExtenderBindingArgs, a *gpu.Assignment) error {
	binding := gpu.NewBinding(args.PodNamespace, args.PodName, args.PodUID, args.Node, a)
	if err := e.client.CoreV1().Pods(args.PodNamespace).Bind(ctx, binding, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("binding pod %s/%s to %s: %w", args.PodNamespace, args.PodName, args.Node, err)
	}
	return nil
}

// boundAnyway reports whether a binding whose write returned an error took
// effect all the same (the answer was lost): a read right after the write
// finds the pod bound to the node with exactly this assignment
// (gpu.ClassifyBind).
func (e *Extender) boundAnyway(ctx context.Context, args *extenderv1.ExtenderBindingArgs, a *gpu.Assignment) bool {
	pod, err := e.client.CoreV1().Pods(args.PodNamespace).Get(ctx, args.PodName, metav1.GetOptions{})
	return gpu.ClassifyBind(args.PodUID, *a, pod, err) == gpu.BindBound
}

// settleBind settles a bind in doubt by the engine's rule
// (gpu.Ledger.SettleBind) in the background, until it is settled or the
// extender stops (its ledger goes with it).
func (e *Extender) settleBind(d gpu.BindInDoubt, args *extenderv1.ExtenderBindingArgs) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-e.closed:
			cancel()
		case <-ctx.Done():
		}
	}()
	outcome, _ := e.ledger.SettleBind(ctx, d, func(ctx context.Context) (*v1.Pod, error) {
		return e.client.CoreV1().Pods(args.PodNamespace).Get(ctx, args.PodName, metav1.GetOptions{})
	})
	klog.Background().V(2).Info("Settled a bind in doubt", "pod", klog.KRef(args.PodNamespace, args.PodName), "assignment", d.Assignment.String(), "outcome", outcome.String())
}
