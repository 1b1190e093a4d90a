// Package gpu is gpusched's placement engine: it knows every GPU on every
// node and decides which GPUs a pod gets.
//
// The engine is framework-free. Besides the standard library it imports
// only k8s.io/api, k8s.io/apimachinery, the pod-request helper of
// k8s.io/component-helpers (k8s.io/component-helpers/resource) and
// pkg/packing (the packing LP, its own simplex, that prices PairFit's
// shares), so it compiles in seconds and every front end (the
// kube-scheduler plugins, the HTTP extender, the simulator) calls the same
// logic; docs/architecture.md states the rule and internal/importrules
// checks it. Its parts:
//
//   - inventory (inventory.go): a node's GPUs, read from NVIDIA GPU Feature
//     Discovery labels or from the gpusched.io/gpu-devices annotation;
//   - demand (demand.go): what a pod asks for, read from the nvidia.com/gpu
//     resource and gpusched.io/ annotations;
//   - assignment (assignment.go): the gpusched.io/gpu-assigned annotation,
//     the one record of which GPUs a pod was given;
//   - ledger (ledger.go): per-GPU allocation on every node, rebuilt from the
//     assignments of bound pods, plus pods assumed in flight;
//   - fleet and room (fleet.go, room.go, ledger_room.go): the cluster's GPUs
//     and their free room by model, from which PairFit prices the models
//     that model-limited pods need;
//   - fit (fit.go): whether a demand fits a node, on which GPUs, and if not,
//     why (one Reason per cause);
//   - policies (policy.go): how a node is scored and its GPUs chosen;
//   - victims (victims.go): the cheapest pods whose eviction lets a pod fit
//     a node, for preemption;
//   - migrations (migrate.go): the few moves of running pods after which a
//     pod that fits nowhere fits, each move checked by the fit check.
//
// Malformed input never panics: every parse returns a *InvalidValueError that
// names the field, the value and what is allowed.
package gpu
