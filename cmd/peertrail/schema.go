package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/peertrail/peertrail/store"
)

func newSchemaCommand(_ *globalFlags) *cobra.Command {
	var o store.SchemaOptions
	var retentionDays, rollupDays int
	cmd := &cobra.Command{
		Use:   "schema [--cluster NAME]",
		Short: "Print the store's DDL",
		Long: `schema prints the SQL that creates peertrail's database, as peertrail applies it at start
(in order, each statement idempotent).

With --cluster the DDL is for a ClickHouse cluster: every statement ON CLUSTER, replicated
tables (Replicated*MergeTree, ZooKeeper path /clickhouse/tables/{shard}/peertrail/<table>, using
the {shard} and {replica} macros) named <table>_local, and a Distributed table under each plain
name, so the same queries work. Events and chains are sharded by cityHash64(audit_id): the
entry and peer records of a forwarded request, and its chain, land on the same shard.`,
		Example: `  peertrail schema
  peertrail schema --cluster audit --retention-days 14 | clickhouse-client --multiquery`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Retention = time.Duration(retentionDays) * 24 * time.Hour
			o.RollupRetention = time.Duration(rollupDays) * 24 * time.Hour
			ddl, err := store.DDL(o)
			if err != nil {
				return err
			}
			_, err = fmt.Fprint(cmd.OutOrStdout(), ddl)
			return err
		},
	}
	cmd.Flags().StringVar(&o.Cluster, "cluster", "", "ClickHouse cluster name (as in remote_servers)")
	cmd.Flags().IntVar(&retentionDays, "retention-days", int(store.DefaultRetention/(24*time.Hour)), "days to keep events, chains and the auditID lookup")
	cmd.Flags().IntVar(&rollupDays, "rollup-retention-days", int(store.DefaultRollupRetention/(24*time.Hour)), "days to keep the per-minute rollups")
	return cmd
}
