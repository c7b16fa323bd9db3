package storetest

import (
	"context"
	"fmt"

	"github.com/peertrail/peertrail/chain"
	"github.com/peertrail/peertrail/ingest/record"
	"github.com/peertrail/peertrail/store"
)

// Write puts records and chains into s through the store's own writer, as serve's store
// consumer does, so that tests query rows exactly as peertrail writes them.
func Write(ctx context.Context, s store.Store, records []record.Record, chains []chain.Chain) error {
	codec, err := record.NewCodec()
	if err != nil {
		return err
	}
	defer codec.Close()
	w := store.NewWriter(s, codec, store.WriterOptions{})
	if err := w.WriteEvents(ctx, records); err != nil {
		return fmt.Errorf("write events: %w", err)
	}
	if err := w.WriteChains(ctx, chains); err != nil {
		return fmt.Errorf("write chains: %w", err)
	}
	return nil
}
