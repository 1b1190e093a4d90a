// Package floor bounds how low the simulator's headline metric (the
// unallocated GPU % at arrived 100%) can go on a workload, whatever the
// policy: the packing LP's bound for every placement, the online floor for
// placements that never refuse a pod that fits, a bound for placements of
// every large share, and offline best-fit-decreasing as a reference
// packing (Of, one Floor per seed). The LP's bound comes with its
// certificate, checked exactly (pkg/packing); docs/simulator.md#floors
// explains each measure.
//
// It needs no scheduler: the engine (pkg/gpu), the LP (pkg/packing) and
// the workloads (pkg/trace).
package floor
