package main

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/peertrail/peertrail/internal/termsafe"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/peertrail/peertrail/gate"
)

func newGateCommand(_ *globalFlags) *cobra.Command {
	var (
		srv    serverFlags
		output string
	)
	cmd := &cobra.Command{
		Use:   "gate",
		Short: "Ask whether the upgrade may replace the next apiserver (exit 0 = proceed)",
		Long: `gate asks a running peertrail serve for the upgrade gate's verdict over its recent window
and prints it with every check. The exit status is what an upgrade script acts on:

  0  proceed: forwarded requests succeed, no misleading 404s, no broken chains, identities
     survive forwarding, every apiserver's audit arrives, versions within the skew policy
  3  pause: at least one check fails; the reasons are printed
  5  peertrail serve could not be reached (or the address is not its API)
  6  the reader's credential was refused
  1  the gate could not be asked otherwise (peertrail failing)

Thresholds are peertrail serve's --gate-* flags. The gate answers readers only: give a
reader's token (--token-file, or $PEERTRAIL_TOKEN) or certificate (--client-cert, --client-key).`,
		Example: `  # In a rolling-upgrade script, before replacing the next apiserver:
  export PEERTRAIL_TOKEN=$(cat reader.token)
  until peertrail gate --server https://peertrail.kube-system:9443 --ca-file ca.crt; do sleep 30; done`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(cmd, output); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			body, err := srv.get(ctx, "/api/v1/gate")
			if err != nil {
				return err
			}
			var v gate.Verdict
			if err := json.Unmarshal(body, &v); err != nil {
				return fmt.Errorf("decode verdict: %w", err)
			}
			out := cmd.OutOrStdout()
			switch output {
			case "json", "yaml":
				if err := printJSON(out, output, body); err != nil {
					return err
				}
			default:
				printVerdict(out, v)
			}
			if !v.Proceed {
				return exitError{code: exitPause}
			}
			return nil
		},
	}
	srv.register(cmd.Flags())
	addOutputFlag(cmd, &output)
	return cmd
}

// exitError ends the process with a status but prints nothing more.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func printVerdict(out io.Writer, v gate.Verdict) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "verdict:\t%s (window %s)\n", strings.ToUpper(v.Verdict), v.Window)
	for _, c := range v.Checks {
		mark := "ok"
		if !c.OK {
			mark = "FAIL"
		}
		// Details name apiservers and versions, which a client chooses where they are not configured.
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", mark, c.Name, termsafe.String(c.Detail))
	}
	tw.Flush()
}
