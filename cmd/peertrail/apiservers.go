package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/peertrail/peertrail/chain"
	"github.com/peertrail/peertrail/internal/termsafe"
)

func newAPIServersCommand(_ *globalFlags) *cobra.Command {
	var (
		srv          serverFlags
		output       string
		at, since    string
		until        string
		resourceOnly string
	)
	cmd := &cobra.Command{
		Use:   "apiservers",
		Short: "Show what each apiserver served or forwarded, per version, from when to when",
		Long: `apiservers asks a running peertrail serve for the capability history its store keeps: per
apiserver and the version it ran when it received each request (from its own loopback
requests), each group/version/resource it served (answered itself, or as the peer of a forward)
or forwarded to a peer, from the first to the end of the last minute it was seen doing so.
During a rolling upgrade an apiserver's lines change at its replacement: what the old version
forwarded, the new one serves; in the minute of the restart each version has its own lines.

--at TIME shows the version epoch of each apiserver that holds TIME, to the second as far as
serve's version history reaches (each apiserver's last 32 starts, kept across restarts), else
to the minute; --since (default 24h)
and --until a time range. TIME is RFC 3339 or a duration ago (15m). The API answers readers
only: give a reader's token (--token-file, or $PEERTRAIL_TOKEN) or certificate.`,
		Example: `  PEERTRAIL_TOKEN=$(cat reader.token) peertrail apiservers --since 6h
  peertrail apiservers --at 2026-11-29T16:52:00Z --server https://peertrail:9443 --ca-file ca.crt --token-file reader.token
  peertrail apiservers --resource podgroups -o json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(cmd, output); err != nil {
				return err
			}
			// The API reads these times; a wrong one is the command line's error, said before
			// anything is asked.
			for _, t := range []struct{ flag, v string }{{"--at", at}, {"--since", since}, {"--until", until}} {
				if t.v == "" {
					continue
				}
				if _, err := time.ParseDuration(t.v); err == nil {
					continue
				}
				if _, err := time.Parse(time.RFC3339Nano, t.v); err != nil {
					return usageError(cmd, "%s %q: want an RFC 3339 time (2026-11-30T10:00:00Z) or a duration ago (15m)", t.flag, t.v)
				}
			}
			q := url.Values{}
			if at != "" {
				q.Set("at", at)
			} else {
				q.Set("since", since)
				if until != "" {
					q.Set("until", until)
				}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			body, err := srv.get(ctx, "/api/v1/apiservers?"+q.Encode())
			if err != nil {
				return err
			}
			var doc struct {
				At      *time.Time               `json:"at"`
				Since   time.Time                `json:"since"`
				Until   time.Time                `json:"until"`
				History []chain.CapabilityRecord `json:"history"`
			}
			if err := json.Unmarshal(body, &doc); err != nil {
				return fmt.Errorf("decode the capability history: %w", err)
			}
			if resourceOnly != "" {
				var kept []chain.CapabilityRecord
				for _, r := range doc.History {
					if r.Resource == resourceOnly {
						kept = append(kept, r)
					}
				}
				doc.History = kept
			}
			if output == "json" || output == "yaml" {
				b, err := json.Marshal(doc)
				if err != nil {
					return err
				}
				return printJSON(cmd.OutOrStdout(), output, b)
			}
			w := cmd.OutOrStdout()
			if doc.At != nil {
				fmt.Fprintf(w, "the version epochs that hold %s\n", doc.At.Format(time.RFC3339))
			} else {
				fmt.Fprintf(w, "from %s to %s\n", doc.Since.Format(time.RFC3339), doc.Until.Format(time.RFC3339))
			}
			if len(doc.History) == 0 {
				fmt.Fprintln(w, "no apiserver served or forwarded a resource then")
				return nil
			}
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "APISERVER\tVERSION\tROLE\tRESOURCE\tFROM\tUNTIL\tREQUESTS")
			for _, r := range doc.History {
				version := r.Version
				if version == "" {
					version = "-"
				}
				// Versions come from user agents, which a client chooses where names are not configured.
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\n", termsafe.String(r.APIServer), termsafe.String(version), r.Role,
					termsafe.String(chain.GVR{Group: r.Group, Version: r.APIVersion, Resource: r.Resource}.String()),
					r.From.Format(time.RFC3339), r.Until.Format(time.RFC3339), r.Requests)
			}
			return tw.Flush()
		},
	}
	srv.register(cmd.Flags())
	addOutputFlag(cmd, &output)
	f := cmd.Flags()
	f.StringVar(&at, "at", "", "show the version epoch of each apiserver that holds this time (RFC 3339, or a duration ago)")
	f.StringVar(&since, "since", "24h", "start of the history (RFC 3339, or a duration ago)")
	f.StringVar(&until, "until", "", "end of the history (default: now)")
	f.StringVar(&resourceOnly, "resource", "", "only this resource (e.g. podgroups)")
	return cmd
}
