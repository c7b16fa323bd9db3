package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	"github.com/peertrail/peertrail/correlate"
)

// printChainRecords prints the answer of GET /api/v1/chains/{auditID}/records: the chain, then
// each audit event behind it, indented, under the apiserver and stage that sent it.
func printChainRecords(w io.Writer, body []byte) error {
	var r struct {
		Chain   correlate.Chain          `json:"chain"`
		Records []correlate.StoredRecord `json:"records"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return fmt.Errorf("decode chain records: %w", err)
	}
	printChain(w, &r.Chain)
	fmt.Fprintf(w, "\n%d audit records:\n", len(r.Records))
	for _, rec := range r.Records {
		fmt.Fprintf(w, "\n# %s %s at %s (received %s)\n", rec.APIServer, rec.Stage,
			rec.StageTimestamp.Format("2006-01-02T15:04:05.000000Z07:00"), rec.ReceivedAt.Format("2006-01-02T15:04:05.000000Z07:00"))
		var out bytes.Buffer
		if err := json.Indent(&out, rec.Event, "", "  "); err != nil {
			fmt.Fprintf(w, "%s\n", rec.Event)
			continue
		}
		fmt.Fprintf(w, "%s\n", out.Bytes())
	}
	return nil
}
