package store_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/peertrail/peertrail/chain"
	"github.com/peertrail/peertrail/ingest/record"
	"github.com/peertrail/peertrail/store"
)

// A database written by the rollups of migration 0003 keeps its counts through 0006, and from
// then on a reclassified chain moves to its final class.
func TestRollupsUpgradeToFinalClass(t *testing.T) {
	out := runSubprocess(t, "rollup-upgrade", 2*time.Minute)
	if !strings.Contains(out, "ok") {
		t.Fatalf("helper: %s", out)
	}
}

func rollupUpgradeHelper(ctx context.Context, fail func(string, ...any) int) int {
	s, err := store.OpenEmbedded(ctx, store.EmbeddedOptions{})
	if err != nil {
		return fail("open: %v", err)
	}
	defer s.Close()
	ms, err := store.Migrations()
	if err != nil {
		return fail("%v", err)
	}
	// The schema as peertrail wrote it before 0005 (not recorded: Migrate runs them again,
	// each statement idempotent).
	if err := s.Exec(ctx, "CREATE DATABASE IF NOT EXISTS "+store.Database); err != nil {
		return fail("%v", err)
	}
	for _, m := range ms[:4] {
		stmts, err := m.Statements(store.SchemaOptions{})
		if err != nil {
			return fail("%v", err)
		}
		for _, st := range stmts {
			if err := s.Exec(ctx, st); err != nil {
				return fail("migration %d: %v", m.Version, err)
			}
		}
	}
	base := time.Now().UTC().Truncate(time.Hour).Add(-2 * time.Hour)
	var chains []chain.Chain
	for i := range 20 {
		at := base.Add(time.Duration(i) * time.Second)
		chains = append(chains, chainAt(fmt.Sprintf("upgrade-%02d", i), at, chain.StateFinal, at.Add(2*time.Second)))
	}
	// Inserted with the columns of that schema (other_sides came with 0005, the sides'
	// versions with 0011).
	later := func(c store.Column) bool {
		return c.Name == "other_sides" || c.Name == "entry_apiserver_version" || c.Name == "peer_apiserver_version"
	}
	cols := slices.DeleteFunc(slices.Clone(store.ChainColumns), later)
	var rows [][]any
	for i := range chains {
		full := store.ChainRow(&chains[i])
		var row []any
		for j, c := range store.ChainColumns {
			if !later(c) {
				row = append(row, full[j])
			}
		}
		rows = append(rows, row)
	}
	if err := s.Insert(ctx, store.ChainsTable, cols, rows); err != nil {
		return fail("insert under 0004: %v", err)
	}
	if err := store.Migrate(ctx, s, store.SchemaOptions{}, nil); err != nil {
		return fail("migrate: %v", err)
	}
	counts := func() (string, error) {
		r, err := s.Query(ctx, "SELECT class, sum(chains) AS n FROM peertrail.chains_per_minute WHERE entry_apiserver = 'chains-a' GROUP BY class ORDER BY class", nil)
		if err != nil {
			return "", err
		}
		var parts []string
		for i := range r.Rows {
			parts = append(parts, r.Value(i, "class")+"="+r.Value(i, "n"))
		}
		return strings.Join(parts, " "), nil
	}
	if got, err := counts(); err != nil || got != "proxied=20" {
		return fail("after the migration the rollup counts %q (%v), want proxied=20", got, err)
	}
	codec, err := record.NewCodec()
	if err != nil {
		return fail("%v", err)
	}
	w := store.NewWriter(s, codec, store.WriterOptions{})
	var late []chain.Chain
	for _, c := range chains[:5] {
		c.Revision, c.Class, c.LastReceived = 2, chain.ClassBroken, c.LastReceived.Add(time.Minute)
		c.Peer, c.Findings = nil, []chain.Finding{chain.FindingPeerAuditMissing}
		late = append(late, c)
	}
	if err := w.WriteChains(ctx, late); err != nil {
		return fail("write the reclassified chains: %v", err)
	}
	if got, err := counts(); err != nil || got != "broken=5 proxied=15" {
		return fail("after reclassifying 5, the rollup counts %q (%v), want broken=5 proxied=15", got, err)
	}
	r, err := s.Query(ctx, "SELECT sumMap(findings) AS f FROM peertrail.chains_per_minute WHERE entry_apiserver = 'chains-a'", nil)
	if err != nil || r.Value(0, "f") != "{'peer_audit_missing':5}" {
		return fail("findings after reclassifying: %v %v", r, err)
	}
	fmt.Println("ok")
	return 0
}
