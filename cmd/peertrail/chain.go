package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/peertrail/peertrail/chain"
	"github.com/peertrail/peertrail/internal/termsafe"
)

func newChainCommand(_ *globalFlags) *cobra.Command {
	var (
		srv     serverFlags
		output  string
		records bool
		chainID string
	)
	cmd := &cobra.Command{
		Use:   "chain AUDIT_ID",
		Short: "Show what happened to the request(s) of one auditID: entry and peer records, class and findings",
		Long: `chain asks a running peertrail serve for the chain of one request, by the auditID the
apiserver gave it (the Audit-Id response header, or the auditID of any of its audit records),
and prints it: which apiserver got the call, which served it, the codes each recorded, the
class and findings, and the latencies. A client may give its own Audit-ID to several requests:
then every chain of the auditID is printed, oldest first, each as "chain N of M" (finding
audit_id_reused), and --chain picks one of them by its chain ID. It reads the same whether the
chain is recent (in memory) or days old (in the store, for as long as retention keeps it).
--records adds the audit events behind one chain (the newest, or --chain's), each as its
apiserver sent it (from the store). What clients chose (paths, names, user agents, auditIDs)
is printed with the characters a terminal could act on escaped; -o json and -o yaml give the
API's answer exact. The chain API answers readers only: give a reader's token (--token-file,
or $PEERTRAIL_TOKEN) or certificate (--client-cert, --client-key).`,
		Example: `  PEERTRAIL_TOKEN=$(cat reader.token) peertrail chain 4a1b2c3d-0000-4000-8000-00000000abcd
  peertrail chain 4a1b2c3d-0000-4000-8000-00000000abcd --records
  peertrail chain 4a1b2c3d-0000-4000-8000-00000000abcd --chain 9f2c... --records
  peertrail chain 4a1b2c3d-0000-4000-8000-00000000abcd -o json --server https://peertrail:9443 --ca-file ca.crt --token-file reader.token`,
		Args: argsNamed("AUDIT_ID (the auditID of a request: its Audit-Id response header, or the auditID of any of its audit records)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(cmd, output); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			path := "/api/v1/chains/" + url.PathEscape(args[0])
			if records {
				path += "/records"
			}
			if chainID != "" {
				path += "?chain=" + url.QueryEscape(chainID)
			}
			body, err := srv.get(ctx, path)
			if err != nil {
				return err
			}
			if output == "json" || output == "yaml" {
				return printJSON(cmd.OutOrStdout(), output, body)
			}
			if records {
				return printChainRecords(cmd.OutOrStdout(), body)
			}
			var ans chain.ChainAnswer
			if err := json.Unmarshal(body, &ans); err != nil || ans.Chain == nil {
				return fmt.Errorf("decode chain: %w", err)
			}
			printChains(cmd.OutOrStdout(), &ans, chainID != "")
			return nil
		},
	}
	srv.register(cmd.Flags())
	addOutputFlag(cmd, &output)
	cmd.Flags().BoolVar(&records, "records", false, "also show the audit events of the chain as the apiservers sent them (kept in the store)")
	cmd.Flags().StringVar(&chainID, "chain", "", "the chain ID of one of the auditID's chains, when clients gave it to several requests (default: all of them; with --records, the newest)")
	return cmd
}

// printChains prints the answer of GET /api/v1/chains/{auditID}: every chain of the auditID,
// oldest first, or with one (--chain) that one in full and the others in a line each.
func printChains(w io.Writer, ans *chain.ChainAnswer, one bool) {
	if ans.Warning != "" {
		fmt.Fprintf(w, "warning: %s\n\n", termsafe.String(ans.Warning))
	}
	all := append(append([]*chain.Chain{}, ans.OtherChains...), ans.Chain)
	chain.SortChains(all)
	n := len(all)
	if n == 1 {
		printChain(w, ans.Chain)
		return
	}
	if one {
		for i, c := range all {
			if c == ans.Chain {
				fmt.Fprintf(w, "chain %d of %d with this auditID (a client gave it to %d requests; audit_id_reused)\n", i+1, n, n)
			}
		}
		printChain(w, ans.Chain)
		fmt.Fprintf(w, "\nthe other chains of auditID %s (--chain ID shows one):\n", termsafe.String(ans.AuditID))
		for _, c := range all {
			if c != ans.Chain {
				fmt.Fprintf(w, "  %s\n", chainLine(c))
			}
		}
		return
	}
	fmt.Fprintf(w, "%d chains with auditID %s: a client gave it to %d requests (audit_id_reused); oldest first\n", n, termsafe.String(ans.AuditID), n)
	for i, c := range all {
		fmt.Fprintf(w, "\n--- chain %d of %d: %s\n", i+1, n, termsafe.String(c.ID))
		printChain(w, c)
	}
}

// chainLine is one chain in a line: its ID, class, request and who answered.
func chainLine(c *chain.Chain) string {
	who := "-"
	if s := c.Entry; s != nil {
		who = s.APIServer
	} else if s := c.Peer; s != nil {
		who = s.APIServer
	}
	return termsafe.String(fmt.Sprintf("%s  %s  %s %s  %s answered %d  first received %s", c.ID, c.Class, c.Verb, c.RequestURI, who, c.Code,
		c.FirstReceived.Format("2006-01-02T15:04:05.000000Z07:00")))
}

func printChain(w io.Writer, c *chain.Chain) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	findings := "none"
	if len(c.Findings) > 0 {
		fs := make([]string, len(c.Findings))
		for i, f := range c.Findings {
			fs[i] = string(f)
		}
		findings = strings.Join(fs, ", ")
	}
	user := c.User
	if c.RealUser != "" {
		user += " (impersonated by " + c.RealUser + ")"
	}
	// Every value is escaped: the auditID, the path, the names and the user agent are what a
	// client sent, and the explanation quotes them.
	row := func(name, format string, args ...any) {
		fmt.Fprintf(tw, "%s:\t%s\n", name, termsafe.String(fmt.Sprintf(format, args...)))
	}
	row("audit ID", "%s", c.AuditID)
	row("class", "%s (%s)", c.Class, c.State)
	row("findings", "%s", findings)
	row("why", "%s", c.Explanation)
	row("request", "%s %s", c.Verb, c.RequestURI)
	row("resource", "%s", chain.GVR{Group: c.Group, Version: c.Version, Resource: c.Resource})
	row("user", "%s", user)
	row("client got", "%d", c.Code)
	for _, s := range []struct {
		role string
		side *chain.Side
	}{{"entry", c.Entry}, {"peer", c.Peer}} {
		if s.side == nil {
			row(s.role, "(no record)")
			continue
		}
		row(s.role, "%s%s answered %d in %s, sourceIPs %v, stages %v", s.side.APIServer, onVersion(s.side), s.side.Code,
			s.side.Duration().Round(time.Microsecond), s.side.SourceIPs, s.side.Stages)
	}
	for _, o := range c.Others {
		row("also", "%s%s answered %d, sourceIPs %v", o.APIServer, onVersion(o), o.Code, o.SourceIPs)
	}
	if c.Class == chain.ClassProxied {
		row("forwarding overhead", "%s", time.Duration(c.ForwardingOverheadSeconds*float64(time.Second)).Round(time.Microsecond))
	}
	tw.Flush()
}

// onVersion is " (v1.36.3)", the version the side's apiserver ran then, or "" when unknown.
func onVersion(s *chain.Side) string {
	if s.APIServerVersion == "" {
		return ""
	}
	return " (" + s.APIServerVersion + ")"
}
