package kubectlplugin

import (
	"context"
	"errors"

	"github.com/spf13/cobra"
)

func whatIfCommand(ctx context.Context, o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "what-if",
		Short: "Where pods would land on the live cluster, or an export, with extra nodes, under each policy",
		RunE: func(cmd *cobra.Command, _ []string) error {
			_ = ctx
			return errors.New("what-if: not built yet")
		},
	}
}
