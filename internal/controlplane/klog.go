package controlplane

import (
	"flag"
	"fmt"
	"os"
	"sync"

	"k8s.io/klog/v2"
)

var quietOnce sync.Once

// QuietKlog restricts klog's output on stderr to messages of severity
// threshold ("ERROR" or "FATAL") and above, for the whole process and once:
// the API server and the scheduler log every request and every decision at
// info level, and some harmless conditions of an in-process control plane
// as errors.
func QuietKlog(threshold string) {
	quietOnce.Do(func() {
		fs := flag.NewFlagSet("controlplane-klog", flag.ContinueOnError)
		klog.InitFlags(fs)
		for name, value := range map[string]string{
			"logtostderr":                      "true",
			"legacy_stderr_threshold_behavior": "false",
			"stderrthreshold":                  threshold,
		} {
			if err := fs.Set(name, value); err != nil {
				// Only possible if klog renamed a flag; logging stays
				// noisy but functional.
				fmt.Fprintf(os.Stderr, "controlplane: klog flag %s: %v\n", name, err)
			}
		}
	})
}
