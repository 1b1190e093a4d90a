package validation

import (
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/gpusched/gpusched/pkg/apis/config"
)

// maxDriverName and maxAttributeID are resource.k8s.io/v1's limits on a
// driver name and on the identifier part of an attribute name.
const (
	maxDriverName  = 63
	maxAttributeID = 32
)

// validateDRA checks the DRA section: a driver name as ResourceSlices
// spell it (a DNS subdomain of at most 63 characters), and attribute names
// as devices spell them ("identifier" or "domain/identifier"). The driver
// is required only when the section is enabled.
func validateDRA(path *field.Path, d *config.DRA) field.ErrorList {
	var errs field.ErrorList
	switch {
	case d.Driver == "" && !d.Enabled:
	case d.Driver == "":
		errs = append(errs, field.Required(path.Child("driver"), "the DRA driver whose devices are GPUs, e.g. gpu.nvidia.com"))
	case len(d.Driver) > maxDriverName:
		errs = append(errs, field.TooLong(path.Child("driver"), d.Driver, maxDriverName))
	default:
		for _, msg := range validation.IsDNS1123Subdomain(d.Driver) {
			errs = append(errs, field.Invalid(path.Child("driver"), d.Driver, msg))
		}
	}
	for i, name := range d.GroupAttributes {
		p := path.Child("groupAttributes").Index(i)
		domain, id, qualified := strings.Cut(name, "/")
		if !qualified {
			domain, id = "", name
		}
		if qualified {
			for _, msg := range validation.IsDNS1123Subdomain(domain) {
				errs = append(errs, field.Invalid(p, name, "domain: "+msg))
			}
		}
		if len(id) > maxAttributeID {
			errs = append(errs, field.Invalid(p, name, "the name after the domain must be at most 32 characters"))
		}
		for _, msg := range validation.IsCIdentifier(id) {
			errs = append(errs, field.Invalid(p, name, msg))
		}
	}
	return errs
}
