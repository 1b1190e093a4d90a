// Package report is what simulations give back, without the scheduling
// framework:
//
//   - a run's result (Run: the allocation curve, the failures, each pod's
//     placement, what its migrations did) and how a run breaks ties
//     (TieBreak);
//   - the report of a workload's runs (Report: a summary per policy, the
//     floors of the seeds) and of a sweep over several workloads (Sweep),
//     as a table, JSON and a self-contained HTML page;
//   - the shard files a sweep run as an Indexed Job writes (ShardFile) and
//     their merge into the report one process would have written (Merge).
//
// pkg/simulator runs the cycles and hands its runs here; a program that
// merges shard files or reads a sweep's JSON links neither the framework
// nor the plugins (internal/importrules keeps it so).
package report
