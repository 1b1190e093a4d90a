package validation

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/gpusched/gpusched/pkg/apis/config"
)

func TestValidateDRAArgs(t *testing.T) {
	tests := []struct {
		name string
		dra  config.DRA
		want []string // "field: type: value" of each error
	}{
		{name: "defaults", dra: config.DRA{Enabled: true, Driver: "gpu.nvidia.com", GroupAttributes: []string{"resource.kubernetes.io/pcieRoot", "partition8"}}},
		{name: "disabled without a driver", dra: config.DRA{}},
		{name: "enabled without a driver", dra: config.DRA{Enabled: true},
			want: []string{"args.dra.driver: Required value"}},
		{name: "driver not a DNS subdomain", dra: config.DRA{Enabled: true, Driver: "GPU_nvidia"},
			want: []string{`args.dra.driver: Invalid value: "GPU_nvidia"`}},
		{name: "driver too long", dra: config.DRA{Driver: strings.Repeat("a", 64) + ".com"},
			want: []string{"args.dra.driver: Too long"}},
		{name: "bad attribute names", dra: config.DRA{Enabled: true, Driver: "gpu.nvidia.com", GroupAttributes: []string{"Bad_Domain/x", "pcie-root", strings.Repeat("a", 33)}},
			want: []string{
				`args.dra.groupAttributes[0]: Invalid value: "Bad_Domain/x"`,
				`args.dra.groupAttributes[1]: Invalid value: "pcie-root"`,
				`args.dra.groupAttributes[2]: Invalid value: "aaaa`,
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := validateDRA(field.NewPath("args", "dra"), &tt.dra)
			if len(errs) != len(tt.want) {
				t.Fatalf("errors %v, want %q", errs, tt.want)
			}
			for i, e := range errs {
				if !strings.HasPrefix(e.Error(), tt.want[i]) {
					t.Errorf("error %d: %q, want prefix %q", i, e.Error(), tt.want[i])
				}
			}
		})
	}
}
