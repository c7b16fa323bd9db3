package main

import (
	"bytes"
	"strings"
	"testing"
	"text/tabwriter"
)

// The "name: value" rows escape what a terminal could act on; the tab and newline are the
// printer's own.
func TestPrinterRowEscapes(t *testing.T) {
	var b bytes.Buffer
	p := &printer{tw: tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)}
	p.row("apiserver\u202e", "kas-a\x1b[2J\u009b")
	p.row("count", 3)
	if err := p.tw.Flush(); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if bad := unsafeForTerminal(out); bad != "" || strings.Count(out, "\n") != 2 {
		t.Fatalf("printer prints %s:\n%q", bad, out)
	}
	if !strings.Contains(out, `kas-a\x1b[2J\u009b`) || !strings.Contains(out, `apiserver\u202e:`) || !strings.Contains(out, "count:") {
		t.Errorf("printer:\n%s", out)
	}
}
