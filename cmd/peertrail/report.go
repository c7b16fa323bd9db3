package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/peertrail/peertrail/internal/termsafe"
	"github.com/peertrail/peertrail/store"
)

func newReportCommand(_ *globalFlags) *cobra.Command {
	f := &queryFlags{}
	var since, until time.Duration
	var names []string
	var list bool
	cmd := &cobra.Command{
		Use:   "report [flags]",
		Short: "Run the canned investigations over the last minutes",
		Long: `report runs peertrail's canned investigations (store/queries/*.sql) over a window and
prints each result: chains by class per apiserver pair, misleading 404s by resource, failed
forwardings, broken chains, identity mismatches by user, the slowest forwardings, and the
apiserver versions seen.

--query runs named queries instead (any of --list, including those that take other
parameters, given with --param), e.g. all records of one auditID. Like sql, it asks a running
` + "`peertrail serve`" + ` (--sql-server) or a ClickHouse server (--clickhouse-dsn).`,
		Example: `  peertrail report --since 15m
  peertrail report --since 2h --query misleading_404s -o csv
  peertrail report --query audit_id_records --query audit_id_chain --param audit_id=4a1b2c3d-...
  peertrail report --list`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFormat(cmd, f.format); err != nil {
				return err
			}
			all, err := store.Queries()
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if list {
				for _, q := range all {
					params := ""
					if len(q.Params) > 0 {
						params = " (" + strings.Join(q.Params, ", ") + ")"
					}
					fmt.Fprintf(out, "%-32s %s%s\n", q.Name, q.Title, params)
				}
				return nil
			}
			var run []store.NamedQuery
			if len(names) == 0 {
				for _, q := range all {
					if q.Report {
						run = append(run, q)
					}
				}
			} else {
				for _, n := range names {
					q, err := store.QueryNamed(n)
					if err != nil {
						return usageError(cmd, "%v", err)
					}
					run = append(run, q)
				}
			}
			if since <= until {
				return usageError(cmd, "--since must reach further back than --until")
			}
			params, err := f.paramMap(false)
			if err != nil {
				return err
			}
			now := time.Now().UTC()
			window := store.Window(now.Add(-until), since-until)
			for k, v := range window {
				if _, ok := params[k]; !ok {
					params[k] = v
				}
			}
			s, err := f.open(cmd.Context())
			if err != nil {
				return err
			}
			defer s.Close()
			if f.format == "table" {
				fmt.Fprintf(out, "peertrail report: %s to %s UTC\n", params["since"], params["until"])
			}
			var failed []string
			for _, q := range run {
				res, err := q.Run(cmd.Context(), s, params)
				if f.format == "table" {
					fmt.Fprintf(out, "\n== %s (%s)\n%s\n\n", q.Title, q.Name, wrap(q.Description, 100))
				}
				if err != nil {
					// The engine's message may quote the stored values it failed on.
					fmt.Fprintf(cmd.ErrOrStderr(), "%s: %s\n", q.Name, termsafe.String(err.Error()))
					failed = append(failed, q.Name)
					continue
				}
				if err := render(out, res, f.format); err != nil {
					return err
				}
			}
			if len(failed) > 0 {
				return fmt.Errorf("%d queries failed: %s", len(failed), strings.Join(failed, ", "))
			}
			return nil
		},
	}
	fs := cmd.Flags()
	f.add(fs)
	fs.DurationVar(&since, "since", 15*time.Minute, "the window starts this long ago")
	fs.DurationVar(&until, "until", 0, "the window ends this long ago")
	fs.StringArrayVar(&names, "query", nil, "run this named query instead of the report (repeatable; see --list)")
	fs.BoolVar(&list, "list", false, "list the named queries and exit")
	return cmd
}

// wrap breaks text into lines of at most n characters.
func wrap(text string, n int) string {
	var b strings.Builder
	col := 0
	for _, w := range strings.Fields(text) {
		if col > 0 && col+1+len(w) > n {
			b.WriteByte('\n')
			col = 0
		} else if col > 0 {
			b.WriteByte(' ')
			col++
		}
		b.WriteString(w)
		col += len(w)
	}
	return b.String()
}
