package gpu

import "fmt"

// maxValueInError bounds how much of a rejected value an error message quotes,
// so a huge annotation cannot flood an event.
const maxValueInError = 80

// InvalidValueError reports a label, annotation or resource whose value the
// engine cannot accept. It names the field, the value and what is allowed, so
// the message can be shown to the pod's owner as it is.
type InvalidValueError struct {
	// Field is the label, annotation or resource name, e.g. "gpusched.io/gpu-milli".
	Field string
	// Value is the rejected value as written.
	Value string
	// Allowed says what the field accepts.
	Allowed string
}

func (e *InvalidValueError) Error() string {
	v := e.Value
	if len(v) > maxValueInError {
		v = v[:maxValueInError] + "..."
	}
	return fmt.Sprintf("invalid %s %q: %s", e.Field, v, e.Allowed)
}

func invalid(field, value, allowed string) *InvalidValueError {
	return &InvalidValueError{Field: field, Value: value, Allowed: allowed}
}
