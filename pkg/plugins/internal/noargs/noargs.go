// Package noargs checks the args of a plugin that takes none: the
// kube-scheduler hands an out-of-tree plugin its pluginConfig args
// undecoded (runtime.Unknown), or nil when the profile gives none.
package noargs

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
)

// Check returns nil for no args (nil, or empty, {} or null), else an error
// naming the plugin, what it was given and why it takes none.
func Check(plugin string, obj runtime.Object, why string) error {
	if obj == nil {
		return nil
	}
	u, ok := obj.(*runtime.Unknown)
	if ok {
		switch strings.TrimSpace(string(u.Raw)) {
		case "", "{}", "null":
			return nil
		}
		return fmt.Errorf("%s takes no args (%s); got %s", plugin, why, u.Raw)
	}
	return fmt.Errorf("%s takes no args (%s); got %T", plugin, why, obj)
}
