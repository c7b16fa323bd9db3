package sqlhttp_test

import (
	"context"
	"testing"

	"github.com/peertrail/peertrail/store/sqlhttp"
)

// BenchmarkReadPool measures what enforcing read-only and the allowlist costs a small query:
// the engine's own call on the writer's connection (the baseline), a read on a pooled read-only
// connection (the parser's classification, the allowlist's syntax tree, the streamed output and
// the kill marker added), a read in a format joined from the stream (JSON), and a read with a
// client setting, which opens a connection of its own.
func BenchmarkReadPool(b *testing.B) {
	s := engine(b)
	ctx := context.Background()
	p, err := sqlhttp.NewReadPool(ctx, s, sqlhttp.ReadLimits{})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	const q = "SELECT count() FROM (SELECT arrayJoin(range(1000)))"
	b.Run("engine", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.Engine().Exec(ctx, q, "TSV", nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("pooled", func(b *testing.B) {
		for b.Loop() {
			if _, err := p.Run(ctx, sqlhttp.ReadQuery{Text: q, Format: "TSV"}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("pooled-json", func(b *testing.B) {
		for b.Loop() {
			if _, err := p.Run(ctx, sqlhttp.ReadQuery{Text: q, Format: "JSON"}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("own-connection", func(b *testing.B) {
		for b.Loop() {
			if _, err := p.Run(ctx, sqlhttp.ReadQuery{Text: q, Format: "TSV", Settings: [][2]string{{"output_format_json_quote_64bit_integers", "0"}}}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
