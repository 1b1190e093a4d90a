// Package gpupreemption is the GPUPreemption kube-scheduler plugin:
// upstream's DefaultPreemption (candidate nodes, PodDisruptionBudgets, the
// choice among nodes, evicting victims, nominating the node, workload-aware
// preemption of Workload API pod groups) with victims chosen by the GPUs
// they free, and gangs kept whole.
//
// On each candidate node it asks the engine (gpu.ChooseVictims) for the
// cheapest set of lower-priority pods that frees one placement the pod can
// use — holders of one GPU for a share, only as many as the share lacks;
// every holder of the GPUs for whole GPUs — and keeps that set when the
// Filter plugins agree the pod then fits. Otherwise (the node is short of
// CPU or memory too, another plugin objects) it falls back to upstream's
// reprieve, trying the pods outside the engine's set first. A pod of a
// GPUGang gang is a victim only with all its bound siblings, and a gang pod
// preempts only if the whole gang could fit once every lower-priority pod
// were gone. See docs/queueing.md.
package gpupreemption

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	configv1 "k8s.io/kube-scheduler/config/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultpreemption"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/kubernetes/pkg/scheduler/framework/preemption"

	"github.com/gpusched/gpusched/pkg/plugins/internal/noargs"
)

// Name is the plugin's name in a KubeSchedulerConfiguration. It replaces
// DefaultPreemption at postFilter.
const Name = "GPUPreemption"

// defaultArgs are DefaultPreemption's args as the kube-scheduler defaults
// them for a profile that gives none (dry-run preemption on 10 % of the
// nodes, and at least 100, in 1.37), taken from its own defaulting so that
// they follow upstream.
func defaultArgs() (*config.DefaultPreemptionArgs, error) {
	versioned := &configv1.DefaultPreemptionArgs{}
	scheme.Scheme.Default(versioned)
	args := &config.DefaultPreemptionArgs{}
	if err := scheme.Scheme.Convert(versioned, args, nil); err != nil {
		return nil, fmt.Errorf("%s: DefaultPreemption's default args: %w", Name, err)
	}
	return args, nil
}

// GPUPreemption is DefaultPreemption with GPU-aware victim selection. See
// the package comment.
type GPUPreemption struct {
	*defaultpreemption.DefaultPreemption
	handle fwk.Handle
}

var (
	_ fwk.PostFilterPlugin  = &GPUPreemption{}
	_ preemption.Interface  = &GPUPreemption{}
	_ fwk.PreEnqueuePlugin  = &GPUPreemption{}
	_ fwk.EnqueueExtensions = &GPUPreemption{}
)

// New builds the plugin. It takes no args: its candidate sampling is
// DefaultPreemption's default.
func New(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	if err := noargs.Check(Name, obj, "its candidate sampling is DefaultPreemption's default"); err != nil {
		return nil, err
	}
	args, err := defaultArgs()
	if err != nil {
		return nil, err
	}
	dp, err := defaultpreemption.New(ctx, args, h, feature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	pl := &GPUPreemption{DefaultPreemption: dp, handle: h}
	dp.Evaluator = preemption.NewEvaluator(Name, h, pl, dp.Executor)
	return pl, nil
}

// Name implements fwk.Plugin.
func (pl *GPUPreemption) Name() string { return Name }

// PostFilter preempts for a pod that fits no node: not at all for a gang pod
// whose gang could not fit even with every lower-priority pod gone (gangGate),
// else as DefaultPreemption does, with SelectVictimsOnNode below. A failure
// is always Unschedulable: UnschedulableAndUnresolvable would stop the
// PostFilter plugins that follow, and GPUGang's must run to release a gang
// whose pod found no room.
func (pl *GPUPreemption) PostFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, m fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
	if status := pl.gangGate(ctx, state, pod); status != nil {
		return nil, status
	}
	result, status := pl.DefaultPreemption.PostFilter(ctx, state, pod, m)
	if status.Code() == fwk.UnschedulableAndUnresolvable {
		return result, fwk.NewStatus(fwk.Unschedulable, status.Reasons()...)
	}
	return result, status
}
