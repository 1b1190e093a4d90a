package gpu

import (
	"fmt"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Assignment is the record of which GPUs a pod was given. It is written to the
// pod as the gpusched.io/gpu-assigned annotation before the pod is bound, and
// read back to rebuild the ledger; it holds everything the ledger needs, so a
// later edit of the pod's demand annotations cannot change what it holds.
//
// The annotation value is a list of key=value fields separated by ";":
//
//	node=gpu-a100-0;gpus=0,1;milli=1000;memory=0;uuids=GPU-8f2c...,GPU-77d1...
//
// node and gpus are required; milli defaults to 1000 (whole GPUs), memory to
// 0; uuids is present when the node's inventory knows them. Readers ignore
// unknown keys, so fields can be added without breaking older readers.
type Assignment struct {
	// Node is the node the GPUs belong to. The ledger counts the assignment
	// only for a pod bound to this node.
	Node string
	// Devices are the GPU indices, in the order they were chosen.
	Devices []int
	// UUIDs, when known, are the UUIDs of Devices, in the same order.
	UUIDs []string
	// Milli is the part of each GPU taken, 1..1000.
	Milli int64
	// MemoryMiB is the memory reserved on each GPU by a share; 0 for whole GPUs.
	MemoryMiB int64
}

// String renders the annotation value.
func (a *Assignment) String() string {
	var b strings.Builder
	b.Grow(48 + 40*len(a.UUIDs))
	b.WriteString("node=")
	b.WriteString(a.Node)
	b.WriteString(";gpus=")
	for i, d := range a.Devices {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(d))
	}
	b.WriteString(";milli=")
	b.WriteString(strconv.FormatInt(a.Milli, 10))
	b.WriteString(";memory=")
	b.WriteString(strconv.FormatInt(a.MemoryMiB, 10))
	if len(a.UUIDs) > 0 {
		b.WriteString(";uuids=")
		b.WriteString(strings.Join(a.UUIDs, ","))
	}
	return b.String()
}

const assignmentAllowed = "want node=<node>;gpus=<index>[,<index>...][;milli=<1..1000>][;memory=<MiB>][;uuids=<uuid>[,<uuid>...]]"

// ParseAssignment parses a gpusched.io/gpu-assigned annotation value.
func ParseAssignment(s string) (Assignment, error) {
	fail := func(why string) (Assignment, error) {
		return Assignment{}, invalid(AnnotationAssigned, s, why+"; "+assignmentAllowed)
	}
	a := Assignment{Milli: MilliPerGPU}
	var haveGPUs bool
	for rest := s; rest != ""; {
		var field string
		field, rest, _ = strings.Cut(rest, ";")
		key, value, ok := strings.Cut(field, "=")
		if !ok {
			return fail(fmt.Sprintf("field %q has no '='", field))
		}
		switch key {
		case "node":
			a.Node = value
		case "gpus":
			haveGPUs = true
			for item := range strings.SplitSeq(value, ",") {
				n, err := strconv.Atoi(item)
				if err != nil || n < 0 {
					return fail(fmt.Sprintf("GPU index %q is not a non-negative integer", item))
				}
				for _, d := range a.Devices {
					if d == n {
						return fail(fmt.Sprintf("GPU index %d is listed twice", n))
					}
				}
				a.Devices = append(a.Devices, n)
			}
		case "milli":
			n, err := strconv.ParseInt(value, 10, 64)
			if err != nil || n < 1 || n > MilliPerGPU {
				return fail(fmt.Sprintf("milli %q is not an integer from 1 to 1000", value))
			}
			a.Milli = n
		case "memory":
			n, err := strconv.ParseInt(value, 10, 64)
			if err != nil || n < 0 {
				return fail(fmt.Sprintf("memory %q is not a non-negative integer", value))
			}
			a.MemoryMiB = n
		case "uuids":
			a.UUIDs = strings.Split(value, ",")
		}
	}
	switch {
	case a.Node == "":
		return fail("node is missing")
	case !haveGPUs:
		return fail("gpus is missing")
	case len(a.Devices) > MaxDevicesPerNode:
		return fail(fmt.Sprintf("more than %d GPUs", MaxDevicesPerNode))
	case a.UUIDs != nil && len(a.UUIDs) != len(a.Devices):
		return fail(fmt.Sprintf("%d uuids for %d gpus", len(a.UUIDs), len(a.Devices)))
	case a.Milli < MilliPerGPU && len(a.Devices) != 1:
		return fail("a share (milli below 1000) must name exactly one GPU")
	}
	return a, nil
}

// NewBinding is the Binding that binds a pod to node with its assignment a
// (nil for a pod without GPUs): the API server copies the Binding's
// annotations onto the pod in the same write that sets spec.nodeName, so a
// bound pod never lacks its assignment; and the UID makes the write fail if
// the pod was replaced meanwhile. Every front end that binds uses it.
func NewBinding(namespace, name string, uid types.UID, node string, a *Assignment) *v1.Binding {
	b := &v1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: uid},
		Target:     v1.ObjectReference{Kind: "Node", Name: node},
	}
	if a != nil {
		b.Annotations = map[string]string{AnnotationAssigned: a.String()}
	}
	return b
}
