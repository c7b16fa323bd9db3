package main

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/peertrail/peertrail/internal/termsafe"
	"io"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/peertrail/peertrail/gate"
	"github.com/peertrail/peertrail/metrics"
)

func newGateCommand(_ *globalFlags) *cobra.Command {
	var (
		srv     serverFlags
		output  string
		servers []string
	)
	srv.server = "http://127.0.0.1:8443"
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
reader's token (--token-file, or $PEERTRAIL_TOKEN) or certificate (--client-cert, --client-key).

In the HA layout give every aggregator (--server once for each, or a comma-separated list): all
are asked at once, and the verdict is taken only from aggregators that are caught up with their
agents (their check agents_caught_up passes): proceed when one of them says proceed and none of
them says pause; pause (3) when none is caught up; 5 (or 6) only when none answered.`,
		Example: `  # In a rolling-upgrade script, before replacing the next apiserver:
  export PEERTRAIL_TOKEN=$(cat reader.token)
  until peertrail gate --server https://peertrail.kube-system:9443 --ca-file ca.crt; do sleep 30; done

  # The HA layout: two aggregators
  peertrail gate --server https://agg-0:9443,https://agg-1:9443 --ca-file ca.crt`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(cmd, output); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			if len(servers) > 1 {
				return gateOfMany(ctx, cmd.OutOrStdout(), srv, servers, output)
			}
			if len(servers) == 1 {
				srv.server = servers[0]
			}
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
	cmd.Flags().StringSliceVar(&servers, "server", []string{srv.server}, "base URL of a running peertrail serve (https:// when it serves TLS, its default); in the HA layout,\n"+
		"every aggregator: the flag once for each, or a comma-separated list")
	srv.registerCredentials(cmd.Flags())
	addOutputFlag(cmd, &output)
	return cmd
}

// gateAnswer is one server's answer to peertrail gate.
type gateAnswer struct {
	Server   string        `json:"server"`
	Error    string        `json:"error,omitempty"`
	CaughtUp bool          `json:"caught_up"`
	Verdict  *gate.Verdict `json:"verdict,omitempty"`
	err      error
}

// gateOfMany asks every server at once and decides from the answers of the caught-up ones.
func gateOfMany(ctx context.Context, out io.Writer, srv serverFlags, servers []string, output string) error {
	c, err := srv.client(30 * time.Second)
	if err != nil {
		return err
	}
	answers := make([]gateAnswer, len(servers))
	var wg sync.WaitGroup
	for i, base := range servers {
		wg.Go(func() {
			a := gateAnswer{Server: base}
			body, err := apiGet(ctx, c, base, "/api/v1/gate")
			if err == nil {
				var v gate.Verdict
				if err = json.Unmarshal(body, &v); err == nil {
					a.Verdict = &v
					a.CaughtUp = caughtUp(v)
				}
			}
			if err != nil {
				a.err, a.Error = err, oneLine(err.Error())
			}
			answers[i] = a
		})
	}
	wg.Wait()
	var chosen *gateAnswer
	proceed, answered := false, false
	for i := range answers {
		a := &answers[i]
		if a.Verdict == nil {
			continue
		}
		answered = true
		if !a.CaughtUp {
			continue
		}
		switch {
		case chosen == nil:
			chosen, proceed = a, a.Verdict.Proceed
		case !a.Verdict.Proceed:
			chosen, proceed = a, false
		}
	}
	if !answered {
		return answers[0].err
	}
	switch output {
	case "json", "yaml":
		body, err := json.Marshal(struct {
			Proceed bool         `json:"proceed"`
			Servers []gateAnswer `json:"servers"`
		}{proceed, answers})
		if err != nil {
			return err
		}
		if err := printJSON(out, output, body); err != nil {
			return err
		}
	default:
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		for _, a := range answers {
			switch {
			case a.Verdict == nil:
				fmt.Fprintf(tw, "%s:\tno answer: %s\n", a.Server, a.Error)
			case !a.CaughtUp:
				fmt.Fprintf(tw, "%s:\t%s, not counted: behind its agents\n", a.Server, strings.ToUpper(a.Verdict.Verdict))
			default:
				fmt.Fprintf(tw, "%s:\t%s, caught up\n", a.Server, strings.ToUpper(a.Verdict.Verdict))
			}
		}
		tw.Flush()
		if chosen == nil {
			fmt.Fprintln(out, "verdict:  PAUSE: no aggregator that answered is caught up with its agents")
		} else {
			fmt.Fprintf(out, "from %s:\n", chosen.Server)
			printVerdict(out, *chosen.Verdict)
		}
	}
	if !proceed {
		return exitError{code: exitPause}
	}
	return nil
}

// caughtUp reports whether the verdict is of a server that has what its agents had: an
// aggregator whose check agents_caught_up passes, or a server without agents (no such check).
func caughtUp(v gate.Verdict) bool {
	for _, c := range v.Checks {
		if c.Name == metrics.CheckAgentsCaughtUp {
			return c.OK
		}
	}
	return true
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
