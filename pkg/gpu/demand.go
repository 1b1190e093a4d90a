package gpu

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Demand is what a pod asks of GPUs.
type Demand struct {
	// Count is the number of GPUs: whole GPUs, or 1 for a share.
	Count int
	// Milli is the part of each GPU the pod takes, in milli-GPU: MilliPerGPU
	// for whole GPUs, 1..999 for a share of one GPU.
	Milli int64
	// MemoryMiB is the GPU memory the pod needs on each of its GPUs; 0 means
	// any. A share reserves this much of its GPU's memory.
	MemoryMiB int64
	// Models lists the GPU models the pod may run on, matched without regard
	// to case; empty means any model.
	Models []string
	// MilliCPU is the pod's CPU request, which host-aware policies weigh
	// (PolicyInfo.HostAware). Policy.Demand fills it in; DemandFromPod leaves it 0.
	MilliCPU int64
	// HostMemoryMiB is the pod's memory request in MiB, which FragFit weighs
	// (Policy.Demand fills it in, as MilliCPU).
	HostMemoryMiB int64
}

// IsZero reports whether the pod asks for no GPU at all.
func (d *Demand) IsZero() bool { return d.Count == 0 }

// IsShare reports whether the pod asks for a share of one GPU.
func (d *Demand) IsShare() bool { return d.Count == 1 && d.Milli < MilliPerGPU }

// PackingItems is the demand as items of the packing LP (pkg/packing): a
// share is one item of its milli-GPU, each GPU of a whole-GPU pod an item of
// MilliPerGPU, and a demand without GPUs no item.
func (d *Demand) PackingItems() (size int64, n int) {
	switch {
	case d.Count <= 0 || d.Milli <= 0:
		return 0, 0
	case d.IsShare():
		return d.Milli, 1
	}
	return MilliPerGPU, d.Count
}

// TotalMilli is the demand in milli-GPU summed over its GPUs.
func (d *Demand) TotalMilli() int64 { return int64(d.Count) * d.Milli }

// AllowsModel reports whether a GPU of the given model may serve the demand.
func (d *Demand) AllowsModel(model string) bool {
	if len(d.Models) == 0 {
		return true
	}
	for _, m := range d.Models {
		if strings.EqualFold(m, model) {
			return true
		}
	}
	return false
}

// String renders the demand for logs and messages, e.g. "2 GPUs" or
// "250 milli-GPU, 10240 MiB, models [A100]".
func (d *Demand) String() string {
	var b strings.Builder
	if d.IsShare() {
		fmt.Fprintf(&b, "%d milli-GPU", d.Milli)
	} else {
		fmt.Fprintf(&b, "%d GPUs", d.Count)
	}
	if d.MemoryMiB > 0 {
		fmt.Fprintf(&b, ", %d MiB", d.MemoryMiB)
	}
	if len(d.Models) > 0 {
		fmt.Fprintf(&b, ", models %q", d.Models)
	}
	return b.String()
}

// DemandFromPod reads a pod's GPU demand:
//
//   - whole GPUs from the nvidia.com/gpu resource (the larger of request and
//     limit per container; the sum over containers or the largest init
//     container, whichever is more, as Kubernetes computes a pod's request);
//   - a share of one GPU from gpusched.io/gpu-milli, 1..999, which must not be
//     combined with a nvidia.com/gpu request;
//   - memory per GPU from gpusched.io/gpu-memory;
//   - allowed models from gpusched.io/gpu-models.
//
// A pod with none of these has a zero Demand. Every malformed value is
// reported, each as an *InvalidValueError, joined into one error; the Demand
// is then zero and must not be used.
func DemandFromPod(pod *v1.Pod) (Demand, error) {
	var errs []error
	count, err := wholeGPUs(pod)
	if err != nil {
		errs = append(errs, err)
	}
	d := Demand{Count: int(count), Milli: MilliPerGPU}
	annotations := pod.Annotations

	if raw, ok := annotations[AnnotationMilli]; ok {
		m, err := strconv.ParseInt(strings.TrimSpace(raw), 10, 64)
		switch {
		case err != nil || m < 1 || m >= MilliPerGPU:
			errs = append(errs, invalid(AnnotationMilli, raw, "want an integer share of one GPU in milli-GPU, from 1 to 999"))
		case count > 0:
			errs = append(errs, invalid(AnnotationMilli, raw, fmt.Sprintf(
				"cannot be combined with a %s request: a pod takes either a share of one GPU (%s alone) or whole GPUs (%s)",
				ResourceGPU, AnnotationMilli, ResourceGPU)))
		default:
			d.Count, d.Milli = 1, m
		}
	}
	if raw, ok := annotations[AnnotationMemory]; ok {
		mem, err := parseMemoryMiB(raw)
		if err != nil {
			errs = append(errs, err)
		}
		d.MemoryMiB = mem
	}
	if raw, ok := annotations[AnnotationModels]; ok {
		models, err := parseModels(raw)
		if err != nil {
			errs = append(errs, err)
		}
		d.Models = models
	}
	if len(errs) == 0 && d.Count == 0 && (d.MemoryMiB > 0 || len(d.Models) > 0) {
		key := AnnotationMemory
		if _, ok := annotations[key]; !ok {
			key = AnnotationModels
		}
		errs = append(errs, invalid(key, annotations[key], fmt.Sprintf(
			"applies only to a pod that asks for GPUs: add a %s request or %s", ResourceGPU, AnnotationMilli)))
	}
	if len(errs) > 0 {
		return Demand{}, errors.Join(errs...)
	}
	return d, nil
}

// wholeGPUs is the pod's effective nvidia.com/gpu request.
func wholeGPUs(pod *v1.Pod) (int64, error) {
	containerGPUs := func(c *v1.Container) (int64, error) {
		q, ok := c.Resources.Limits[ResourceGPU]
		if r, has := c.Resources.Requests[ResourceGPU]; has && (!ok || r.Cmp(q) > 0) {
			q, ok = r, true
		}
		if !ok {
			return 0, nil
		}
		n, exact := q.AsInt64()
		if !exact || n < 0 || n > MaxDevicesPerNode {
			return 0, invalid(string(ResourceGPU), q.String(), fmt.Sprintf(
				"container %q: want a whole number of GPUs from 0 to %d", c.Name, MaxDevicesPerNode))
		}
		return n, nil
	}
	var sum, initMax int64
	for i := range pod.Spec.Containers {
		n, err := containerGPUs(&pod.Spec.Containers[i])
		if err != nil {
			return 0, err
		}
		sum += n
	}
	for i := range pod.Spec.InitContainers {
		n, err := containerGPUs(&pod.Spec.InitContainers[i])
		if err != nil {
			return 0, err
		}
		if c := &pod.Spec.InitContainers[i]; c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways {
			sum += n // a sidecar runs beside the app containers
		} else if n > initMax {
			initMax = n
		}
	}
	return max(sum, initMax), nil
}

// parseMemoryMiB accepts "20480" (MiB) or a quantity such as "20Gi", rounded
// up to whole MiB.
func parseMemoryMiB(raw string) (int64, error) {
	const allowed = `want a positive amount of GPU memory: an integer number of MiB ("20480") or a quantity ("20Gi")`
	s := strings.TrimSpace(raw)
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n <= 0 {
			return 0, invalid(AnnotationMemory, raw, allowed)
		}
		return n, nil
	}
	q, err := resource.ParseQuantity(s)
	if err != nil || q.Sign() <= 0 {
		return 0, invalid(AnnotationMemory, raw, allowed)
	}
	const mib = 1 << 20
	bytes := q.Value() // rounded up to whole bytes
	return (bytes + mib - 1) / mib, nil
}

// parseModels accepts a JSON array of strings, or a comma-separated list when
// the value does not start with "[". Names may hold any characters; a model
// name with a comma needs the JSON form.
func parseModels(raw string) ([]string, error) {
	const allowed = `want a non-empty list of GPU models: a JSON array of strings (["NVIDIA-A100-SXM4-80GB"]) or a comma-separated list`
	s := strings.TrimSpace(raw)
	var models []string
	if strings.HasPrefix(s, "[") {
		if err := json.Unmarshal([]byte(s), &models); err != nil {
			return nil, invalid(AnnotationModels, raw, allowed)
		}
	} else {
		models = strings.Split(s, ",")
	}
	out := models[:0]
	for _, m := range models {
		if m = strings.TrimSpace(m); m != "" {
			out = append(out, m)
		}
	}
	if len(out) == 0 {
		return nil, invalid(AnnotationModels, raw, allowed)
	}
	return out, nil
}

// DemandAnnotations are the pod annotations DemandFromPod reads; with the
// pod's ResourceGPU requests they are everything a pod's GPU demand is
// read from. A change to any other field of a pod cannot change its demand.
var DemandAnnotations = []string{AnnotationMilli, AnnotationMemory, AnnotationModels}

// SameDemandSource reports whether two versions of a pod carry the same
// values (or absence) of every one of DemandAnnotations: if they do, an
// update between them cannot have changed the pod's GPU demand (its
// ResourceGPU requests cannot change on update).
func SameDemandSource(a, b *v1.Pod) bool {
	for _, key := range DemandAnnotations {
		va, oka := a.Annotations[key]
		vb, okb := b.Annotations[key]
		if va != vb || oka != okb {
			return false
		}
	}
	return true
}

// DemandKey identifies a demand: demands with equal keys are placed alike
// by every policy. It is comparable, for maps and equality.
type DemandKey struct {
	Count         int
	Milli         int64
	MemoryMiB     int64
	Models        string // the allowed models, sorted, joined by "|"
	MilliCPU      int64
	HostMemoryMiB int64
}

// Key is the demand's key; a zero demand has Milli 0 in its key.
func (d *Demand) Key() DemandKey {
	k := DemandKey{Count: d.Count, Milli: d.Milli, MemoryMiB: d.MemoryMiB, MilliCPU: d.MilliCPU, HostMemoryMiB: d.HostMemoryMiB}
	if d.IsZero() {
		k.Milli = 0
	}
	switch len(d.Models) {
	case 0:
	case 1:
		k.Models = d.Models[0]
	default:
		models := slices.Clone(d.Models)
		slices.Sort(models)
		k.Models = strings.Join(models, "|")
	}
	return k
}

// ShapeKey is the key of the demand's shape, as the FGD paper groups typical
// pods: CPU, GPU count, milli-GPU per GPU and models; GPU and host memory
// are left out.
func (d *Demand) ShapeKey() DemandKey {
	k := d.Key()
	k.MemoryMiB, k.HostMemoryMiB = 0, 0
	return k
}
