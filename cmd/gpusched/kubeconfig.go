package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gpusched/gpusched/internal/schedconfig"
)

// kubeconfigUsage replaces kube-scheduler's --kubeconfig help, which says
// the flag is ignored with --config.
const kubeconfigUsage = "Path to a kubeconfig file with the API server's location and credentials; " +
	"default $KUBECONFIG (one file), else the in-cluster configuration. " +
	"With --config it fills the file's clientConnection.kubeconfig when that is empty; a path the file sets wins."

// withKubeconfig makes the scheduler command honour --kubeconfig and
// $KUBECONFIG beside --config (see applyKubeconfig) and says so in --help.
func withKubeconfig(command *cobra.Command) {
	if f := command.Flags().Lookup("kubeconfig"); f != nil {
		f.Usage = kubeconfigUsage
	}
	run := command.RunE
	command.RunE = func(cmd *cobra.Command, args []string) error {
		cleanup, err := applyKubeconfig(cmd.Flags(), os.Getenv("KUBECONFIG"))
		if err != nil {
			return err
		}
		defer cleanup()
		return run(cmd, args)
	}
}

// applyKubeconfig decides the kubeconfig the scheduler uses, before
// kube-scheduler reads its flags:
//
//   - the --kubeconfig flag, or else env ($KUBECONFIG) when it names one
//     file; a list of files is an error, as kube-scheduler reads only one;
//   - without --config, the flag is set to it, which kube-scheduler honours;
//   - with --config whose clientConnection.kubeconfig is empty, a copy of
//     the file with that field filled is written to a temporary file and
//     --config is pointed at the copy; cleanup removes it;
//   - a kubeconfig the file sets is kept.
//
// cleanup is never nil.
func applyKubeconfig(fs *pflag.FlagSet, env string) (cleanup func(), err error) {
	cleanup = func() {}
	flag := fs.Lookup("kubeconfig")
	kubeconfig := flag.Value.String()
	if !flag.Changed {
		if env == "" {
			return cleanup, nil
		}
		if strings.Contains(env, string(os.PathListSeparator)) {
			return cleanup, fmt.Errorf("$KUBECONFIG lists several files (%q); gpusched reads one: pass it with --kubeconfig", env)
		}
		kubeconfig = env
	}
	if kubeconfig == "" {
		return cleanup, nil
	}
	configFile := fs.Lookup("config").Value.String()
	if configFile == "" {
		return cleanup, fs.Set("kubeconfig", kubeconfig)
	}

	raw, err := os.ReadFile(configFile)
	if err != nil {
		return cleanup, fmt.Errorf("reading --config: %w", err)
	}
	doc, err := schedconfig.Parse(raw)
	if err != nil {
		return cleanup, fmt.Errorf("--config %s: %w", configFile, err)
	}
	set, err := doc.Kubeconfig()
	if err != nil {
		return cleanup, fmt.Errorf("--config %s: %w", configFile, err)
	}
	if set != "" {
		return cleanup, nil
	}
	if err := doc.SetKubeconfig(kubeconfig); err != nil {
		return cleanup, fmt.Errorf("--config %s: %w", configFile, err)
	}
	out, err := doc.Encode()
	if err != nil {
		return cleanup, err
	}
	f, err := os.CreateTemp("", "gpusched-"+strings.TrimSuffix(filepath.Base(configFile), filepath.Ext(configFile))+"-*.yaml")
	if err != nil {
		return cleanup, fmt.Errorf("writing the configuration with the kubeconfig: %w", err)
	}
	cleanup = func() { os.Remove(f.Name()) }
	_, werr := f.Write(out)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return cleanup, fmt.Errorf("writing the configuration with the kubeconfig: %w", werr)
	}
	return cleanup, fs.Set("config", f.Name())
}
