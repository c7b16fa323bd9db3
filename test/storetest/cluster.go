package storetest

import (
	"context"
	"fmt"
	"regexp"

	"github.com/peertrail/peertrail/store"
)

// The cluster layout on the embedded engine: `peertrail schema --cluster NAME` keeps each
// table's data in <table>_local and puts a Distributed table with the table's own name in
// front of it, so that every query is the same on one server and on a cluster. Whether a query
// really is the same shows on a Distributed table with two shards: ClickHouse refuses a plain
// IN or JOIN whose subquery reads a Distributed table there (distributed_product_mode =
// 'deny'; it wants GLOBAL), and a single server never does.
//
// The embedded engine has no cluster of its own, but like clickhouse-local it reads config.xml
// from its working directory: ClusterConfigXML defines ClusterName there, two shards that are
// both the engine itself (so a Distributed table reads every row twice; this layout is for
// checking that a query runs, not what it counts).

// ClusterName is the cluster ClusterConfigXML defines.
const ClusterName = "two_shards"

// ClusterConfigXML is the config.xml that gives an embedded engine opened in its directory the
// cluster ClusterName.
const ClusterConfigXML = `<clickhouse>
  <!-- the port the shards name: an address with it counts as the engine itself -->
  <tcp_port>9000</tcp_port>
  <remote_servers>
    <` + ClusterName + `>
      <shard><replica><host>127.0.0.1</host><port>9000</port></replica></shard>
      <shard><replica><host>localhost</host><port>9000</port></replica></shard>
    </` + ClusterName + `>
  </remote_servers>
</clickhouse>
`

var distributedTable = regexp.MustCompile(`ENGINE = Distributed\('[^']*', ` + store.Database + `, (\w+)_local,`)

// DistributedTables lists the tables the cluster DDL puts behind a Distributed table.
func DistributedTables() ([]string, error) {
	ddl, err := store.DDL(store.SchemaOptions{Cluster: ClusterName})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range distributedTable.FindAllStringSubmatch(ddl, -1) {
		out = append(out, m[1])
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("storetest: the cluster DDL has no Distributed tables")
	}
	return out, nil
}

// Distribute turns a migrated single-server store into the cluster layout: each of
// DistributedTables is renamed <table>_local, with its data, and a Distributed table over
// ClusterName takes its name. The engine must have been opened next to ClusterConfigXML.
// Materialized views keep writing to the renamed tables' old names: write the data first.
func Distribute(ctx context.Context, s store.Store) error {
	r, err := s.Query(ctx, "SELECT count() FROM system.clusters WHERE cluster = {c:String}", map[string]string{"c": ClusterName})
	if err != nil {
		return err
	}
	if len(r.Rows) != 1 || r.Rows[0][0] != "2" {
		return fmt.Errorf("storetest: the engine has no two-shard cluster %s (was it opened in a directory with ClusterConfigXML as config.xml?)", ClusterName)
	}
	tables, err := DistributedTables()
	if err != nil {
		return err
	}
	for _, t := range tables {
		name := store.Database + "." + t
		for _, stmt := range []string{
			fmt.Sprintf("RENAME TABLE %s TO %s_local", name, name),
			fmt.Sprintf("CREATE TABLE %s AS %s_local ENGINE = Distributed(%s, %s, %s_local, rand())",
				name, name, store.QuoteString(ClusterName), store.Database, t),
		} {
			if err := s.Exec(ctx, stmt); err != nil {
				return fmt.Errorf("storetest: %s: %w", stmt, err)
			}
		}
	}
	return nil
}
