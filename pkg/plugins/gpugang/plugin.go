// Package gpugang is the GPUGang kube-scheduler plugin: all-or-nothing
// placement of the pods of a PodGroup (scheduling.x-k8s.io/v1alpha1), with
// the gang's GPUs kept on one GPU model, and on one interconnect group or
// topology domain where they fit. It is a thin adapter from the scheduling framework to the core in
// pkg/gang; GPUPlacement, in the same profile, chooses each pod's GPUs.
//
// A gang's pods pass the queue together (QueueSort), are checked against the
// cluster as if it were empty (PreFilter), are reserved one by one and wait
// at Permit until minMember of them are reserved or bound, then all go on to
// bind. When one of them times out, is rejected or finds no node before the
// gang is complete, every waiting pod of the gang is rejected, so each
// plugin's Unreserve (GPUPlacement's returns the GPUs to its ledger) runs and
// the gang backs off (PostFilter, Unreserve).
package gpugang

import (
	"context"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpusched/gpusched/pkg/apis/config"
	"github.com/gpusched/gpusched/pkg/apis/config/load"
	"github.com/gpusched/gpusched/pkg/gang"
	"github.com/gpusched/gpusched/pkg/gpu"
	"github.com/gpusched/gpusched/pkg/podgroup"
)

// Name is the plugin's name in a KubeSchedulerConfiguration.
const Name = "GPUGang"

// stateKey is where PreFilter leaves the pod's gang in the CycleState.
const stateKey fwk.StateKey = "PreFilter" + Name

// groupIndex indexes the scheduler's pods by their gang, "namespace/name".
const groupIndex = "gpusched.io/pod-group"

// podGroupSyncTimeout bounds how long New waits for the PodGroup cache.
const podGroupSyncTimeout = 10 * time.Second

// GPUGang schedules gangs. See the package comment.
type GPUGang struct {
	handle fwk.Handle
	args   config.GPUGangArgs
	now    func() time.Time

	// pods are the scheduler's own pods, indexed by gang (groupIndex).
	pods cache.Indexer
	// podGroups caches PodGroup objects, as *unstructured.Unstructured.
	podGroups cache.GenericLister
	dynamic   dynamic.Interface

	// ledger is this plugin's view of the GPUs allocated on each node
	// (PreScore).
	ledger *gpu.Ledger

	// fits caches each gang's fitEmpty result (a fitResult by gang key).
	fits sync.Map

	reservations *gang.Reservations
	backoff      *gang.Backoff
	status       *statusWriter
	reported     *reportedOnce
}

var (
	_ fwk.QueueSortPlugin   = &GPUGang{}
	_ fwk.PreFilterPlugin   = &GPUGang{}
	_ fwk.FilterPlugin      = &GPUGang{}
	_ fwk.PostFilterPlugin  = &GPUGang{}
	_ fwk.PreScorePlugin    = &GPUGang{}
	_ fwk.ScorePlugin       = &GPUGang{}
	_ fwk.ReservePlugin     = &GPUGang{}
	_ fwk.PermitPlugin      = &GPUGang{}
	_ fwk.PostBindPlugin    = &GPUGang{}
	_ fwk.EnqueueExtensions = &GPUGang{}
	_ fwk.SignPlugin        = &GPUGang{}
)

// New builds the plugin from its args (GPUGangArgs, or nil for the
// defaults), validated again here. It starts a cache of PodGroups and waits
// for it up to podGroupSyncTimeout: without the PodGroup CRD installed the
// cache stays empty, and gang pods are reported as naming no PodGroup.
func New(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	args, err := load.GPUGangArgs(obj)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	dyn, err := dynamic.NewForConfig(h.KubeConfig())
	if err != nil {
		return nil, fmt.Errorf("%s: PodGroup client: %w", Name, err)
	}
	p := &GPUGang{
		handle: h, args: *args, now: time.Now, dynamic: dyn,
		ledger:       gpu.NewLedger(),
		reservations: gang.NewReservations(), backoff: gang.NewBackoff(nil),
		reported: &reportedOnce{},
	}
	p.status = newStatusWriter(p)
	podInformer := h.SharedInformerFactory().Core().V1().Pods().Informer()
	// Every profile that names GPUGang (its queue sort is shared by all
	// profiles) makes an instance on the same informer: the first adds the
	// index, the others use it.
	if _, ok := podInformer.GetIndexer().GetIndexers()[groupIndex]; !ok {
		if err := podInformer.AddIndexers(cache.Indexers{groupIndex: groupOfObject}); err != nil {
			return nil, fmt.Errorf("%s: indexing pods by PodGroup: %w", Name, err)
		}
	}
	p.pods = podInformer.GetIndexer()
	if _, err := podInformer.AddEventHandler(p.podHandler()); err != nil {
		return nil, fmt.Errorf("%s: watching pods: %w", Name, err)
	}

	factory := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)
	pgInformer := factory.ForResource(podgroup.Resource)
	p.podGroups = pgInformer.Lister()
	if _, err := pgInformer.Informer().AddEventHandler(p.podGroupHandler()); err != nil {
		return nil, fmt.Errorf("%s: watching PodGroups: %w", Name, err)
	}
	factory.Start(ctx.Done())
	go p.status.run(ctx)
	byHandle.Store(h, p)

	syncCtx, cancel := context.WithTimeout(ctx, podGroupSyncTimeout)
	defer cancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), pgInformer.Informer().HasSynced) {
		klog.FromContext(ctx).Error(nil, "PodGroups not listed; is the PodGroup CRD installed (deploy/crds)?", "plugin", Name, "resource", podgroup.Resource.String())
	}
	return p, nil
}

// Name implements fwk.Plugin.
func (p *GPUGang) Name() string { return Name }

// groupKey is a gang's "namespace/name".
func groupKey(namespace, name string) string { return namespace + "/" + name }

// groupOfObject indexes a pod by its gang; pods outside a gang, or with a
// malformed label, are not indexed.
func groupOfObject(obj any) ([]string, error) {
	pod, ok := obj.(*v1.Pod)
	if !ok {
		return nil, nil
	}
	name, ok, err := podgroup.NameOf(pod)
	if !ok || err != nil {
		return nil, nil
	}
	return []string{groupKey(pod.Namespace, name)}, nil
}

// members returns the gang's pods the scheduler knows: not terminated.
func (p *GPUGang) members(key string) []*v1.Pod {
	objs, err := p.pods.ByIndex(groupIndex, key)
	if err != nil {
		return nil
	}
	out := make([]*v1.Pod, 0, len(objs))
	for _, o := range objs {
		if pod, ok := o.(*v1.Pod); ok && pod.DeletionTimestamp == nil &&
			pod.Status.Phase != v1.PodSucceeded && pod.Status.Phase != v1.PodFailed {
			out = append(out, pod)
		}
	}
	return out
}

// podGroup returns the gang's PodGroup object as cached, or nil.
func (p *GPUGang) podGroup(namespace, name string) *unstructured.Unstructured {
	obj, err := p.podGroups.ByNamespace(namespace).Get(name)
	if err != nil {
		return nil
	}
	u, _ := obj.(*unstructured.Unstructured)
	return u
}

// gangState is a gang pod's PodGroup, read once per cycle by PreFilter.
type gangState struct {
	key       string
	object    *unstructured.Unstructured
	minMember int
	timeout   time.Duration
	// models are the GPU models the gang's pods may run on (Filter); nil
	// for any.
	models []string
}

// Clone implements fwk.StateData; gangState is never modified.
func (s *gangState) Clone() fwk.StateData { return s }

func gangOf(state fwk.CycleState) *gangState {
	data, err := state.Read(stateKey)
	if err != nil {
		return nil
	}
	return data.(*gangState)
}

// placed returns the gang's members that are reserved or bound, by UID,
// with their nodes.
func (p *GPUGang) placed(key string) map[string]string {
	out := map[string]string{}
	for uid, node := range p.reservations.Of(key) {
		out[string(uid)] = node
	}
	for _, pod := range p.members(key) {
		if pod.Spec.NodeName != "" {
			out[string(pod.UID)] = pod.Spec.NodeName
		}
	}
	return out
}

func logger(ctx context.Context) klog.Logger {
	return klog.FromContext(ctx).WithValues("plugin", Name)
}
