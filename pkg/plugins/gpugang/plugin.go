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
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
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

	// ledger is this plugin's own view of the GPUs allocated on each
	// node, made on first use (ownLedger) and used only in a profile
	// without GPUPlacement, whose ledger the cycle carries otherwise.
	ledger     *gpu.Ledger
	ledgerOnce sync.Once
	// orderWarning logs, once, a profile whose GPUPlacement does not come
	// before GPUGang.
	orderWarning sync.Once

	// fits caches each gang's fitEmpty result (a fitResult by gang key).
	fits sync.Map

	reservations *gang.Reservations
	backoff      *gang.Backoff
	status       *statusWriter
	reported     *reportedOnce
	// served: the API server serves PodGroups (the CRD is installed).
	served atomic.Bool
	// active: this instance schedules (activate). Until then it writes no
	// PodGroup status: a standby replica, whose informers run but whose
	// scheduling loop does not, must not write over the leader's.
	active atomic.Bool
	// profile is the profile's scheduler name; the instance writes the
	// status of gangs whose pods name it ("" when unknown: every gang).
	profile string
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
// for it up to podGroupSyncTimeout. Without the PodGroup CRD installed it
// neither waits nor watches: gang pods are refused saying so, and the cache
// starts when the CRD appears (checked every crdPollInterval), so that a
// profile with GPUGang costs a cluster without gangs nothing.
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
		reservations: gang.NewReservations(), backoff: gang.NewBackoff(nil),
		reported: &reportedOnce{}, profile: h.ProfileName(),
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
	go p.status.run(ctx)

	if !podGroupsServed(h.ClientSet().Discovery()) {
		// A cluster without gangs pays nothing: no wait, no failing
		// watch. Gang pods are refused saying the CRD is missing, and
		// the cache starts once the CRD is installed.
		klog.FromContext(ctx).Info("The PodGroup CRD is not installed (deploy/crds); pods of a gang are refused until it is", "plugin", Name, "resource", podgroup.Resource.String())
		go p.startWhenServed(ctx, h.ClientSet().Discovery(), factory)
		return p, nil
	}
	p.served.Store(true)
	factory.Start(ctx.Done())
	syncCtx, cancel := context.WithTimeout(ctx, podGroupSyncTimeout)
	defer cancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), pgInformer.Informer().HasSynced) {
		klog.FromContext(ctx).Error(nil, "PodGroups not listed within the sync timeout", "plugin", Name, "resource", podgroup.Resource.String(), "timeout", podGroupSyncTimeout)
	}
	return p, nil
}

// crdPollInterval is how often a scheduler started without the PodGroup CRD
// looks for it.
var crdPollInterval = 10 * time.Second

// podGroupsServed says whether the API server serves PodGroups
// (podgroup.Resource). An error other than "not found" counts as served, so
// that a slow discovery never turns gangs off: the cache then retries.
func podGroupsServed(d discovery.DiscoveryInterface) bool {
	list, err := d.ServerResourcesForGroupVersion(podgroup.Resource.GroupVersion().String())
	if apierrors.IsNotFound(err) {
		return false
	}
	if err != nil {
		return true
	}
	for _, r := range list.APIResources {
		if r.Name == podgroup.Resource.Resource {
			return true
		}
	}
	return false
}

// startWhenServed starts the PodGroup cache once the API server serves
// PodGroups; the cache's Add events then requeue the gangs refused before.
func (p *GPUGang) startWhenServed(ctx context.Context, d discovery.DiscoveryInterface, factory dynamicinformer.DynamicSharedInformerFactory) {
	_ = wait.PollUntilContextCancel(ctx, crdPollInterval, false, func(context.Context) (bool, error) {
		return podGroupsServed(d), nil
	})
	if ctx.Err() != nil {
		return
	}
	klog.FromContext(ctx).Info("The PodGroup CRD is installed; watching PodGroups", "plugin", Name)
	factory.Start(ctx.Done())
	p.served.Store(true)
}

// Name implements fwk.Plugin.
func (p *GPUGang) Name() string { return Name }

// activate marks the instance as the one that schedules: PreFilter runs
// only in the scheduling loop, which only the leader of the scheduler's
// replicas runs (a leader that loses its lease exits). The first time, it
// has the status of every cached PodGroup written, so that a replica that
// takes over corrects what the previous leader left unwritten.
func (p *GPUGang) activate() {
	if p.active.Load() || !p.active.CompareAndSwap(false, true) {
		return
	}
	objs, err := p.podGroups.List(labels.Everything())
	if err != nil {
		return
	}
	for _, o := range objs {
		if u, ok := o.(*unstructured.Unstructured); ok {
			p.status.enqueue(groupKey(u.GetNamespace(), u.GetName()))
		}
	}
}

// ownsPod says whether pod is one this instance's profile schedules.
func (p *GPUGang) ownsPod(pod *v1.Pod) bool {
	return p.profile == "" || pod.Spec.SchedulerName == p.profile
}

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
