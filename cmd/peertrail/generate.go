package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/peertrail/peertrail/alerts"
	"github.com/peertrail/peertrail/dashboards"
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
		Args: noArgs,
		RunE: group,
	}
	cmd.AddCommand(newGenerateDashboardsCommand(), newGenerateAlertsCommand())
	return cmd
}

func newGenerateDashboardsCommand() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "dashboards [--out DIR]",
		Short: "Write the Grafana dashboards (MVP rollout, Chain investigation) as JSON",
		Long: `dashboards writes peertrail's Grafana dashboards, generated with the Grafana Foundation SDK:
"MVP rollout" (a Prometheus data source) and "Chain investigation" (a ClickHouse data source,
the grafana-clickhouse-datasource plugin v4). Import them, or provision them from the directory;
each asks for its data source.`,
		Example: `  peertrail generate dashboards
  peertrail generate dashboards --out /var/lib/grafana/dashboards/peertrail`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkRepoOut(cmd, out); err != nil {
				return err
			}
			paths, err := dashboards.Write(out)
			return printWritten(cmd.OutOrStdout(), paths, err)
		},
	}
	cmd.Flags().StringVar(&out, "out", "dashboards/generated", "directory to write into (the default only in the repository's root)")
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
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkRepoOut(cmd, out); err != nil {
				return err
			}
			paths, err := alerts.Write(out, alerts.Options{RunbookBaseURL: runbooks, PeertrailJob: job, GatePausedFor: gatePaused})
			return printWritten(cmd.OutOrStdout(), paths, err)
		},
	}
	cmd.Flags().StringVar(&out, "out", "alerts/generated", "directory to write into (the default only in the repository's root)")
	cmd.Flags().StringVar(&runbooks, "runbook-base-url", alerts.DefaultRunbookBaseURL, "URL the runbooks (alerts/runbooks) are published under")
	cmd.Flags().StringVar(&job, "job", "peertrail", "Prometheus job label of peertrail's scrape target")
	cmd.Flags().DurationVar(&gatePaused, "gate-paused-for", 15*time.Minute, "how long the upgrade gate may say pause before MVPUpgradeGatePaused fires")
	return cmd
}

// checkRepoOut refuses the default --out, a path into the repository, outside the repository's
// root: it would create dashboards/generated or alerts/generated in whatever directory the
// command runs in.
func checkRepoOut(cmd *cobra.Command, out string) error {
	if cmd.Flags().Changed("out") {
		return nil
	}
	if b, err := os.ReadFile("go.mod"); err == nil && strings.Contains(string(b), "module github.com/peertrail/peertrail\n") {
		return nil
	}
	wd, _ := os.Getwd()
	return usageError(cmd, "%s is not the peertrail repository's root, where the default --out %s belongs", wd, out)
}

// printWritten lists the files a generator wrote, one per line, or passes on its error.
func printWritten(w io.Writer, paths []string, err error) error {
	if err != nil {
		return err
	}
	for _, p := range paths {
		fmt.Fprintln(w, p)
	}
	return nil
}
