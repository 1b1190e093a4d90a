// Package gang is the framework-free core of gang scheduling: which gang a pod
// belongs to and in what order gangs are served, whether a gang could fit an
// empty cluster at all, which pods of a gang are reserved, when a gang backs
// off, the phase a gang is in, and where on the GPU topology the rest of a
// gang should go. The GPUGang plugin (pkg/plugins/gpugang) is a thin adapter
// from the scheduling framework to this package.
//
// It imports only the Kubernetes API types and the placement engine
// (pkg/gpu), so its tests run in seconds with plain values for fakes.
package gang
