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

	"github.com/peertrail/peertrail/correlate"
)

func newChainCommand(_ *globalFlags) *cobra.Command {
	var (
		srv     serverFlags
		output  string
		records bool
	)
	cmd := &cobra.Command{
		Use:   "chain AUDIT_ID",
		Short: "Show what happened to one request: its entry and peer records, class and findings",
		Long: `chain asks a running peertrail serve for the chain of one request, by the auditID the
apiserver gave it (the Audit-Id response header, or the auditID of any of its audit records),
and prints it: which apiserver got the call, which served it, the codes each recorded, the
class and findings, and the latencies. It reads the same whether the chain is recent (in
memory) or days old (in the store, for as long as retention keeps it). --records adds the
audit events behind it, each as its apiserver sent it (from the store). The chain API
answers readers only: give a reader's token (--token-file, or $PEERTRAIL_TOKEN) or
certificate (--client-cert, --client-key).`,
		Example: `  PEERTRAIL_TOKEN=$(cat reader.token) peertrail chain 4a1b2c3d-0000-4000-8000-00000000abcd
  peertrail chain 4a1b2c3d-0000-4000-8000-00000000abcd --records
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
			var c correlate.Chain
			if err := json.Unmarshal(body, &c); err != nil {
				return fmt.Errorf("decode chain: %w", err)
			}
			printChain(cmd.OutOrStdout(), &c)
			return nil
		},
	}
	srv.register(cmd.Flags())
	addOutputFlag(cmd, &output)
	cmd.Flags().BoolVar(&records, "records", false, "also show the audit events of the chain as the apiservers sent them (kept in the store)")
	return cmd
}

func printChain(w io.Writer, c *correlate.Chain) {
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
	fmt.Fprintf(tw, "audit ID:\t%s\n", c.AuditID)
	fmt.Fprintf(tw, "class:\t%s (%s)\n", c.Class, c.State)
	fmt.Fprintf(tw, "findings:\t%s\n", findings)
	fmt.Fprintf(tw, "why:\t%s\n", c.Explanation)
	fmt.Fprintf(tw, "request:\t%s %s\n", c.Verb, c.RequestURI)
	fmt.Fprintf(tw, "resource:\t%s\n", correlate.GVR{Group: c.Group, Version: c.Version, Resource: c.Resource})
	fmt.Fprintf(tw, "user:\t%s\n", user)
	fmt.Fprintf(tw, "client got:\t%d\n", c.Code)
	for _, s := range []struct {
		role string
		side *correlate.Side
	}{{"entry", c.Entry}, {"peer", c.Peer}} {
		if s.side == nil {
			fmt.Fprintf(tw, "%s:\t(no record)\n", s.role)
			continue
		}
		fmt.Fprintf(tw, "%s:\t%s%s answered %d in %s, sourceIPs %v, stages %v\n", s.role, s.side.APIServer, onVersion(s.side), s.side.Code,
			s.side.Duration().Round(time.Microsecond), s.side.SourceIPs, s.side.Stages)
	}
	for _, o := range c.Others {
		fmt.Fprintf(tw, "also:\t%s%s answered %d, sourceIPs %v\n", o.APIServer, onVersion(o), o.Code, o.SourceIPs)
	}
	if c.Class == correlate.ClassProxied {
		fmt.Fprintf(tw, "forwarding overhead:\t%s\n", time.Duration(c.ForwardingOverheadSeconds*float64(time.Second)).Round(time.Microsecond))
	}
	tw.Flush()
}

// onVersion is " (v1.36.3)", the version the side's apiserver ran then, or "" when unknown.
func onVersion(s *correlate.Side) string {
	if s.APIServerVersion == "" {
		return ""
	}
	return " (" + s.APIServerVersion + ")"
}
