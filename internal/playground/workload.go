package playground

import (
	"encoding/json"
	"slices"
	"strconv"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// DemoNamespace is where the demo's pods are created.
const DemoNamespace = "default"

// DemoPods is the demo's sample workload for the given node shapes, in
// creation order, every pod with schedulerName set to schedulerName:
//
//   - train-full-node: every GPU of the largest node;
//   - finetune: 2 whole GPUs, restricted (gpusched.io/gpu-models) to the
//     model with the most memory (as the node agent discovers it, see
//     NodeShape.GPUModel);
//   - notebook-0..2: a quarter of one GPU each with 10 GiB of its memory
//     (gpusched.io/gpu-milli, gpusched.io/gpu-memory);
//   - inference: half of one GPU of the model with the least memory;
//   - batch-job: 1 whole GPU that runs for 3 seconds and then Succeeds;
//   - too-big: one GPU more than the largest node has, so it cannot fit.
//
// shapes must not be empty.
func DemoPods(shapes []NodeShape, schedulerName string) []*v1.Pod {
	largest := slices.MaxFunc(shapes, func(a, b NodeShape) int { return a.GPUs - b.GPUs })
	byMemory := func(a, b NodeShape) int { return int(a.MemoryMiB - b.MemoryMiB) }
	mostMemory := slices.MaxFunc(shapes, byMemory).GPUModel()
	leastMemory := slices.MinFunc(shapes, byMemory).GPUModel()
	finetuneGPUs := min(2, largest.GPUs)

	pods := []*v1.Pod{
		wholeGPUs(demoPod("train-full-node"), largest.GPUs),
		models(wholeGPUs(demoPod("finetune"), finetuneGPUs), mostMemory),
	}
	for i := range 3 {
		pods = append(pods, share(demoPod("notebook-"+strconv.Itoa(i)), 250, "10Gi"))
	}
	pods = append(pods,
		models(share(demoPod("inference"), 500, ""), leastMemory),
		annotate(wholeGPUs(demoPod("batch-job"), 1), AnnotationRunTime, "3s"),
		wholeGPUs(demoPod("too-big"), largest.GPUs+1),
	)
	for _, p := range pods {
		p.Spec.SchedulerName = schedulerName
	}
	return pods
}

// demoPod is a pod with one container that asks for 100m CPU and 128Mi and
// never restarts, so that a pod with a run time ends Succeeded.
func demoPod(name string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: DemoNamespace, Labels: map[string]string{"app.kubernetes.io/part-of": "gpusched-demo"}},
		Spec: v1.PodSpec{
			RestartPolicy: v1.RestartPolicyNever,
			Containers: []v1.Container{{
				Name:  "main",
				Image: "registry.k8s.io/pause:3.10",
				Resources: v1.ResourceRequirements{
					Requests: v1.ResourceList{
						v1.ResourceCPU:    resource.MustParse("100m"),
						v1.ResourceMemory: resource.MustParse("128Mi"),
					},
				},
			}},
		},
	}
}

func wholeGPUs(p *v1.Pod, n int) *v1.Pod {
	p.Spec.Containers[0].Resources.Limits = v1.ResourceList{gpu.ResourceGPU: *resource.NewQuantity(int64(n), resource.DecimalSI)}
	return p
}

func share(p *v1.Pod, milli int, memory string) *v1.Pod {
	annotate(p, gpu.AnnotationMilli, strconv.Itoa(milli))
	if memory != "" {
		annotate(p, gpu.AnnotationMemory, memory)
	}
	return p
}

func models(p *v1.Pod, names ...string) *v1.Pod {
	raw, err := json.Marshal(names)
	if err != nil { // a []string always encodes
		panic(err)
	}
	return annotate(p, gpu.AnnotationModels, string(raw))
}

func annotate(p *v1.Pod, key, value string) *v1.Pod {
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[key] = value
	return p
}
