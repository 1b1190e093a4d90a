package playground

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	v1 "k8s.io/api/core/v1"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// settled reports whether a pod has reached what the demo waits for: bound
// and Running, or Succeeded when it has a run time; or found unschedulable
// by the scheduler (its PodScheduled condition is False).
func settled(p *v1.Pod) bool {
	if p.Spec.NodeName == "" {
		c := scheduledCondition(p)
		return c != nil && c.Status == v1.ConditionFalse
	}
	if _, ok := p.Annotations[AnnotationRunTime]; ok {
		return p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed
	}
	return p.Status.Phase == v1.PodRunning
}

func scheduledCondition(p *v1.Pod) *v1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == v1.PodScheduled {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// WriteTable writes one row per pod, in the given order: what it asks for,
// the node it is bound to, the GPUs it got (from its gpusched.io/gpu-assigned
// annotation), its phase, and what the node agent gives its containers
// (devices, by pod name; "-" for a pod not listed). Then, for each pod not
// bound, why: the message of its PodScheduled condition, which is that of
// its latest FailedScheduling event.
func WriteTable(w io.Writer, pods []*v1.Pod, devices map[string]string) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POD\tASKS FOR\tNODE\tGPUS\tPHASE\tDEVICES")
	for _, p := range pods {
		node, gpus, given := "-", "-", "-"
		if p.Spec.NodeName != "" {
			node = p.Spec.NodeName
			gpus = assignedGPUs(p)
		}
		if d, ok := devices[p.Name]; ok {
			given = d
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", p.Name, asksFor(p), node, gpus, p.Status.Phase, given)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var pending []string
	for _, p := range pods {
		if p.Spec.NodeName != "" {
			continue
		}
		why := "not tried by the scheduler yet"
		if c := scheduledCondition(p); c != nil && c.Message != "" {
			why = c.Message
		}
		pending = append(pending, fmt.Sprintf("  %s: %s\n", p.Name, strings.TrimSpace(why)))
	}
	if len(pending) > 0 {
		fmt.Fprintln(w, "\nWhy pods are pending (their FailedScheduling event, also in their PodScheduled condition):")
		for _, line := range pending {
			if _, err := io.WriteString(w, line); err != nil {
				return err
			}
		}
	}
	return nil
}

// asksFor describes a pod's GPU demand, e.g. "2 GPUs, A100-80GB only" or
// "250m of one GPU, 10 GiB".
func asksFor(p *v1.Pod) string {
	d, err := gpu.DemandFromPod(p)
	switch {
	case err != nil:
		return "invalid GPU request"
	case d.IsZero():
		return "no GPU"
	}
	var s string
	switch {
	case d.IsShare():
		s = fmt.Sprintf("%dm of one GPU", d.Milli)
	case d.Count == 1:
		s = "1 GPU"
	default:
		s = fmt.Sprintf("%d GPUs", d.Count)
	}
	if d.MemoryMiB > 0 {
		s += ", " + mebibytes(d.MemoryMiB)
	}
	if len(d.Models) > 0 {
		s += ", " + strings.Join(d.Models, " or ") + " only"
	}
	return s
}

// mebibytes renders a size in MiB, in GiB when it is a whole number of them.
func mebibytes(mib int64) string {
	if mib%1024 == 0 {
		return fmt.Sprintf("%d GiB", mib/1024)
	}
	return fmt.Sprintf("%d MiB", mib)
}

// assignedGPUs renders the pod's assignment annotation: the GPU indices, and
// for a share the milli-GPU and memory it holds on that GPU.
func assignedGPUs(p *v1.Pod) string {
	raw, ok := p.Annotations[gpu.AnnotationAssigned]
	if !ok {
		return "none"
	}
	a, err := gpu.ParseAssignment(raw)
	if err != nil {
		return "unreadable assignment"
	}
	indices := make([]string, len(a.Devices))
	for i, d := range a.Devices {
		indices[i] = strconv.Itoa(d)
	}
	s := "GPU " + strings.Join(indices, ",")
	if len(a.Devices) > 1 {
		s = "GPUs " + strings.Join(indices, ",")
	}
	if a.Milli < gpu.MilliPerGPU {
		s += fmt.Sprintf(" (%dm", a.Milli)
		if a.MemoryMiB > 0 {
			s += ", " + mebibytes(a.MemoryMiB)
		}
		s += ")"
	}
	return s
}
