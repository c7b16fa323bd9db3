package main

import (
	"github.com/spf13/cobra"

	"github.com/peertrail/peertrail/internal/version"
)

func newVersionCommand() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print peertrail's version, VCS revision and Go version",
		Long: `version prints which peertrail this is: the release (or "devel"), the commit it was built
from ("+dirty" when the checkout had changes), the Go version and the platform. A running
serve exports the same as the metric peertrail_build_info.`,
		Example: `  peertrail version
  peertrail version -o json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			i := version.Get()
			return printData(cmd, output, i, func(p *printer) {
				p.row("version", i.Version)
				p.row("revision", i.Revision)
				if i.BuildTime != "" {
					p.row("commit time", i.BuildTime)
				}
				p.row("go", i.GoVersion)
				p.row("platform", i.Platform)
			})
		},
	}
	addOutputFlag(cmd, &output)
	return cmd
}
