package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/peertrail/peertrail/chain"
	"github.com/peertrail/peertrail/internal/termsafe"
)

// printChainRecords prints the answer of GET /api/v1/chains/{auditID}/records: the chain, then
// each audit event behind it, indented, under the apiserver and stage that sent it. The events
// are JSON as the apiserver wrote it, which may hold characters a terminal acts on (JSON need
// not escape U+202E): each line is escaped as printChain's values are.
func printChainRecords(w io.Writer, body []byte) error {
	var r struct {
		Chain             chain.Chain          `json:"chain"`
		ChainsWithAuditID int                  `json:"chains_with_audit_id"`
		Records           []chain.StoredRecord `json:"records"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return fmt.Errorf("decode chain records: %w", err)
	}
	if r.ChainsWithAuditID > 1 {
		fmt.Fprintf(w, "one of %d chains with this auditID (a client gave it to %d requests; audit_id_reused): chain %s; --chain picks another\n",
			r.ChainsWithAuditID, r.ChainsWithAuditID, termsafe.String(r.Chain.ID))
	}
	printChain(w, &r.Chain)
	fmt.Fprintf(w, "\n%d audit records:\n", len(r.Records))
	for _, rec := range r.Records {
		fmt.Fprintf(w, "\n# %s %s at %s (received %s)\n", termsafe.String(rec.APIServer), termsafe.String(rec.Stage),
			rec.StageTimestamp.Format("2006-01-02T15:04:05.000000Z07:00"), rec.ReceivedAt.Format("2006-01-02T15:04:05.000000Z07:00"))
		var out bytes.Buffer
		if err := json.Indent(&out, rec.Event, "", "  "); err != nil {
			out.Reset()
			out.Write(rec.Event)
		}
		for _, line := range strings.Split(strings.TrimRight(out.String(), "\n"), "\n") {
			fmt.Fprintf(w, "%s\n", termsafe.String(line))
		}
	}
	return nil
}
