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
//   - whole GPUs from the nvidia.com/gpu resource;
//   - a share of one GPU, 1..999 milli-GPU, from the gpusched.io/gpu-milli
//     resource (ResourceMilli, counted by quota) or annotation
//     (AnnotationMilli, not counted); neither may be combined with a
//     nvidia.com/gpu request, and when both are set they must agree;
//   - memory per GPU from the gpusched.io/gpu-memory annotation, or for a
//     share from the gpusched.io/gpu-memory-mib resource (ResourceMemoryMiB);
//     when both are set they must agree, and a share asked for as a
//     resource asks for its memory as a resource too (else quota would count
//     the share and not its memory);
//   - allowed models from gpusched.io/gpu-models.
//
// A resource counts as Kubernetes computes a pod's request (podRequest). A
// pod with none of these has a zero Demand. Every malformed value is
// reported, each as an *InvalidValueError, joined into one error; the Demand
// is then zero and must not be used.
func DemandFromPod(pod *v1.Pod) (Demand, error) {
	var errs []error
	note := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	count, err := podRequest(pod, ResourceGPU, "GPUs", MaxDevicesPerNode)
	note(err)
	d := Demand{Count: int(count), Milli: MilliPerGPU}
	annotations := pod.Annotations
	wholeAndShare := fmt.Sprintf("cannot be combined with a %s request: a pod takes either a share of one GPU (%s) or whole GPUs (%s)",
		ResourceGPU, AnnotationMilli, ResourceGPU)

	resMilli, err := podRequest(pod, ResourceMilli, "milli-GPU", MilliPerGPU-1)
	note(err)
	switch {
	case resMilli <= 0:
	case resMilli >= MilliPerGPU:
		note(invalid(string(ResourceMilli), strconv.FormatInt(resMilli, 10),
			"want a share of one GPU in milli-GPU, from 1 to 999, summed over the pod's containers"))
	case count > 0:
		note(invalid(string(ResourceMilli), strconv.FormatInt(resMilli, 10), wholeAndShare))
	default:
		d.Count, d.Milli = 1, resMilli
	}
	if raw, ok := annotations[AnnotationMilli]; ok {
		m, err := strconv.ParseInt(strings.TrimSpace(raw), 10, 64)
		switch {
		case err != nil || m < 1 || m >= MilliPerGPU:
			note(invalid(AnnotationMilli, raw, "want an integer share of one GPU in milli-GPU, from 1 to 999"))
		case count > 0:
			note(invalid(AnnotationMilli, raw, wholeAndShare))
		case resMilli > 0 && m != resMilli:
			note(invalid(AnnotationMilli, raw, fmt.Sprintf(
				"disagrees with the pod's %s resource request of %d: set the share once (the resource, which quota counts), or both to the same value",
				ResourceMilli, resMilli)))
		default:
			d.Count, d.Milli = 1, m
		}
	}

	resMemory, err := podRequest(pod, ResourceMemoryMiB, "MiB", maxMemoryMiB)
	note(err)
	if resMemory > 0 {
		d.MemoryMiB = resMemory
		if count > 0 {
			note(invalid(string(ResourceMemoryMiB), strconv.FormatInt(resMemory, 10), fmt.Sprintf(
				"counts the GPU memory a share reserves, and a pod of whole GPUs takes all of each GPU's memory: "+
					"to ask for GPUs with at least this much memory, use the %s annotation", AnnotationMemory)))
		}
	}
	if raw, ok := annotations[AnnotationMemory]; ok {
		mem, err := parseMemoryMiB(raw)
		note(err)
		if err == nil && resMilli > 0 && resMemory == 0 {
			// Quota would count the share and not its memory.
			note(invalid(AnnotationMemory, raw, fmt.Sprintf(
				"a share asked for with the %s resource asks for its GPU memory with the %s resource (%d), which quota counts, not the annotation",
				ResourceMilli, ResourceMemoryMiB, mem)))
		}
		if err == nil && resMemory > 0 && mem != resMemory {
			note(invalid(AnnotationMemory, raw, fmt.Sprintf(
				"is %d MiB and disagrees with the pod's %s resource request of %d: set the memory once, or both to the same amount",
				mem, ResourceMemoryMiB, resMemory)))
		}
		d.MemoryMiB = mem
	}
	if raw, ok := annotations[AnnotationModels]; ok {
		models, err := parseModels(raw)
		note(err)
		d.Models = models
	}
	if len(errs) == 0 && d.Count == 0 && (d.MemoryMiB > 0 || len(d.Models) > 0) {
		field, value := AnnotationModels, annotations[AnnotationModels]
		if raw, ok := annotations[AnnotationMemory]; ok {
			field, value = AnnotationMemory, raw
		} else if resMemory > 0 {
			field, value = string(ResourceMemoryMiB), strconv.FormatInt(resMemory, 10)
		}
		note(invalid(field, value, fmt.Sprintf(
			"applies only to a pod that asks for GPUs: add a %s request or a %s share", ResourceGPU, AnnotationMilli)))
	}
	if len(errs) > 0 {
		return Demand{}, errors.Join(errs...)
	}
	return d, nil
}

// maxMemoryMiB bounds the ResourceMemoryMiB one container may request
// (16 TiB), so that sums cannot overflow.
const maxMemoryMiB = 1 << 24

// podRequest is the pod's effective request of an extended resource (whole
// units of unit, at most limit per container), as Kubernetes computes it
// (and ResourceQuota counts it): per container the larger of request and
// limit; the sum over the app containers and restartable init containers
// (sidecars), or, if more, what an ordinary init container needs while it
// runs: its own request plus the sidecars declared before it, which run
// beside it.
func podRequest(pod *v1.Pod, name v1.ResourceName, unit string, limit int64) (int64, error) {
	containerRequest := func(c *v1.Container) (int64, error) {
		q, ok := c.Resources.Limits[name]
		if r, has := c.Resources.Requests[name]; has && (!ok || r.Cmp(q) > 0) {
			q, ok = r, true
		}
		if !ok {
			return 0, nil
		}
		n, exact := q.AsInt64()
		if !exact || n < 0 || n > limit {
			return 0, invalid(string(name), q.String(), fmt.Sprintf(
				"container %q: want a whole number of %s from 0 to %d", c.Name, unit, limit))
		}
		return n, nil
	}
	var sum, sidecars, initMax int64
	for i := range pod.Spec.Containers {
		n, err := containerRequest(&pod.Spec.Containers[i])
		if err != nil {
			return 0, err
		}
		sum += n
	}
	for i := range pod.Spec.InitContainers {
		n, err := containerRequest(&pod.Spec.InitContainers[i])
		if err != nil {
			return 0, err
		}
		if c := &pod.Spec.InitContainers[i]; c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways {
			sidecars += n // runs beside the later init containers and the app containers
		} else {
			initMax = max(initMax, n+sidecars)
		}
	}
	return max(sum+sidecars, initMax), nil
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
	return CeilMiB(q), nil // Value rounds up to whole bytes
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
// pod's requests of DemandResources they are everything a pod's GPU demand is
// read from. A change to any other field of a pod cannot change its demand.
var DemandAnnotations = []string{AnnotationMilli, AnnotationMemory, AnnotationModels}

// DemandResources are the extended resources DemandFromPod reads, which
// gpusched accounts GPU by GPU: kube-scheduler's NodeResourcesFit must leave
// them alone (GPUResourcesFit strips them), and a node need not advertise
// them.
var DemandResources = []v1.ResourceName{ResourceGPU, ResourceMilli, ResourceMemoryMiB}

// SameDemandSource reports whether two versions of a pod carry the same
// values (or absence) of every one of DemandAnnotations: if they do, an
// update between them cannot have changed the pod's GPU demand (its
// requests of DemandResources cannot change on update: in-place resize
// changes only CPU and memory).
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
