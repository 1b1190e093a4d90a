package podgroup

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestFromUnstructured(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
		"metadata": map[string]any{"name": "train", "namespace": "ml"},
		"spec":     map[string]any{"minMember": int64(4), "scheduleTimeoutSeconds": int64(30)},
		"status":   map[string]any{"phase": "Running", "scheduled": int64(4)},
	}}
	pg, err := FromUnstructured(u)
	if err != nil {
		t.Fatal(err)
	}
	if pg.Name != "train" || pg.Spec.MinMember != 4 || *pg.Spec.ScheduleTimeoutSeconds != 30 || pg.Status.Phase != PhaseRunning || pg.Status.Scheduled != 4 {
		t.Errorf("got %+v", pg)
	}
	u.Object["spec"] = map[string]any{"minMember": "four"}
	if _, err := FromUnstructured(u); err == nil || !strings.Contains(err.Error(), "ml/train") {
		t.Errorf("a string minMember: %v", err)
	}
}

func TestValidate(t *testing.T) {
	zero, five := int32(0), int32(5)
	tests := []struct {
		spec Spec
		want string
	}{
		{Spec{MinMember: 2}, ""},
		{Spec{MinMember: 2, ScheduleTimeoutSeconds: &five}, ""},
		{Spec{MinMember: 0}, "spec.minMember is 0; it must be at least 1"},
		{Spec{MinMember: -3}, "spec.minMember is -3; it must be at least 1"},
		{Spec{MinMember: 1, ScheduleTimeoutSeconds: &zero}, "spec.scheduleTimeoutSeconds is 0; it must be at least 1"},
	}
	for _, tt := range tests {
		pg := &PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "g"}, Spec: tt.spec}
		err := pg.Validate()
		if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%+v: %v, want %q", tt.spec, err, tt.want)
		}
	}
}

// TestOneModelAnnotation: the PodGroup's gpusched.io/gang-gpu-models
// annotation is "one" (the default) or "mixed"; anything else is an error
// naming the annotation, the value and what is allowed.
func TestOneModelAnnotation(t *testing.T) {
	tests := []struct {
		name        string
		annotations map[string]string
		mixed       bool
		want        string
	}{
		{"absent", nil, false, ""},
		{"one", map[string]string{AnnotationGPUModels: "one"}, false, ""},
		{"mixed", map[string]string{AnnotationGPUModels: "mixed"}, true, ""},
		{"capitalised", map[string]string{AnnotationGPUModels: "Mixed"}, false,
			`PodGroup ml/g: annotation gpusched.io/gang-gpu-models is "Mixed"; it must be "one" (the gang's pods run on one GPU model, the default) or "mixed"`},
		{"empty", map[string]string{AnnotationGPUModels: ""}, false, `annotation gpusched.io/gang-gpu-models is ""`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pg := &PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "g", Annotations: tt.annotations}, Spec: Spec{MinMember: 1}}
			mixed, err := pg.MixedModels()
			verr := pg.Validate()
			if mixed != tt.mixed || (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
				t.Errorf("MixedModels: %v, %v; want %v, %q", mixed, err, tt.mixed, tt.want)
			}
			if (verr == nil) != (err == nil) {
				t.Errorf("Validate: %v, want the same as MixedModels (%v)", verr, err)
			}
		})
	}
}

func TestNameOf(t *testing.T) {
	pod := func(labels map[string]string) *v1.Pod { return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: labels}} }
	if _, ok, err := NameOf(pod(nil)); ok || err != nil {
		t.Errorf("no label: %v, %v", ok, err)
	}
	if name, ok, err := NameOf(pod(map[string]string{LabelPodGroup: "train-1"})); name != "train-1" || !ok || err != nil {
		t.Errorf("valid: %q, %v, %v", name, ok, err)
	}
	_, ok, err := NameOf(pod(map[string]string{LabelPodGroup: "Train_1"}))
	if !ok || err == nil || !strings.Contains(err.Error(), `label scheduling.x-k8s.io/pod-group: value "Train_1" is not a PodGroup name`) {
		t.Errorf("invalid: %v, %v", ok, err)
	}
}
