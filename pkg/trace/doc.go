// Package trace is a workload and a cluster as the simulator, the
// playground and the training environment read them, without the
// scheduling framework:
//
//   - loading: the Alibaba GPU trace's node and pod CSVs and YAML of Node
//     and Pod objects (LoadNodes, LoadPods), recorded GPU telemetry
//     (LoadTelemetry); a malformed input is an InputError naming the file,
//     line and column, the value and what is allowed;
//   - the objects a trace row becomes (NewNode, NewPod), the same requests
//     and labels a real node and pod carry, so the engine reads them alike;
//   - arrival: the order in which a run submits the pods (FGDSequence for
//     the FGD paper's protocol, ReplayEvents for the trace's clock);
//   - workloads made here: the built-in synthetic cluster and workload
//     (Synthetic) and model-constrained variants of a pod list (Constrain).
//
// It imports the engine (pkg/gpu) and the telemetry types, never the
// kube-scheduler: the playground and other tools read traces without
// linking the scheduler (internal/importrules keeps it so).
package trace
