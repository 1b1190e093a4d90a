package noargs

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestCheck(t *testing.T) {
	for _, none := range []runtime.Object{nil, &runtime.Unknown{}, &runtime.Unknown{Raw: []byte("{}")}, &runtime.Unknown{Raw: []byte("null\n")}} {
		if err := Check("P", none, "why"); err != nil {
			t.Errorf("Check(%v) = %v, want nil", none, err)
		}
	}
	for _, tc := range []struct {
		obj  runtime.Object
		want string
	}{
		{&runtime.Unknown{Raw: []byte(`{"ignoredResources":["example.com/fpga"]}`)}, `P takes no args (why); got {"ignoredResources":["example.com/fpga"]}`},
		{&runtime.Unknown{Raw: []byte(`{}x`)}, "got {}x"},
		{&metav1.Status{}, "got *v1.Status"},
	} {
		if err := Check("P", tc.obj, "why"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Check(%v) = %v, want an error with %q", tc.obj, err, tc.want)
		}
	}
}
