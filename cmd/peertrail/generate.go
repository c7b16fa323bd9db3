package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/peertrail/peertrail/alerts"
)

func newGenerateCommand(_ *globalFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "generate",
		Short: "Write the Grafana dashboards or the Prometheus alert rules peertrail ships",
		Long: `generate writes files that are generated from peertrail's code and committed to its
repository: the Grafana dashboards (dashboards/generated) and the Prometheus rules, their
promtool unit tests, a PrometheusRule and an example Alertmanager configuration
(alerts/generated). Run it from the repository root after changing dashboards/ or alerts/;
a test fails while the committed files differ from what the code generates.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newGenerateAlertsCommand())
	return cmd
}

func newGenerateAlertsCommand() *cobra.Command {
	var out, runbooks, job string
	var gatePaused time.Duration
	cmd := &cobra.Command{
		Use:   "alerts [--out DIR]",
		Short: "Write the Prometheus rules, their promtool tests, a PrometheusRule and an Alertmanager example",
		Example: `  peertrail generate alerts
  # for a Prometheus that scrapes peertrail as job "audit" and your own runbook copy:
  peertrail generate alerts --out /tmp/rules --job audit --runbook-base-url https://wiki.example.com/peertrail/`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			paths, err := alerts.Write(out, alerts.Options{RunbookBaseURL: runbooks, PeertrailJob: job, GatePausedFor: gatePaused})
			if err != nil {
				return err
			}
			for _, p := range paths {
				fmt.Fprintln(cmd.OutOrStdout(), p)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "alerts/generated", "directory to write into")
	cmd.Flags().StringVar(&runbooks, "runbook-base-url", alerts.DefaultRunbookBaseURL, "URL the runbooks (alerts/runbooks) are published under")
	cmd.Flags().StringVar(&job, "job", "peertrail", "Prometheus job label of peertrail's scrape target")
	cmd.Flags().DurationVar(&gatePaused, "gate-paused-for", 15*time.Minute, "how long the upgrade gate may say pause before MVPUpgradeGatePaused fires")
	return cmd
}
