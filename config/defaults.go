package config

import (
	"time"

	"github.com/peertrail/peertrail/ingest"
	"github.com/peertrail/peertrail/ingest/record"
)

// Defaults returns the configuration used where neither the file nor a flag says otherwise.
func Defaults() File {
	return File{
		Listen:  ":8443",
		DataDir: "data",
		Limits: Limits{
			MaxBodyBytes:         32 << 20,
			MaxBatchItems:        record.DefaultMaxItems,
			MaxUnknownAPIServers: ingest.DefaultMaxUnknownAPIServers,
			MaxInflight:          64,
			// Eight bodies of the largest size; a control plane's batches are far smaller.
			MaxReadingBytes:    256 << 20,
			ReadTimeout:        Duration(60 * time.Second),
			MaxDeadLetterBytes: 1 << 30,
		},
		Spool: Spool{
			MaxBytes:     10 << 30,
			SegmentBytes: 64 << 20,
			Fsync:        "always",
			FsyncPeriod:  Duration(time.Second),
			// The apiserver's webhook retries a batch 5 times, backing off from 10 s by 1.5x:
			// it gives it up 81-98 s after the first failure when the connection is refused,
			// after about four minutes when every try hangs its 30 s; twice the longer, with room
			// to spare.
			DedupHorizon: Duration(10 * time.Minute),
		},
		Correlate: Correlate{
			ChainWindow:       Duration(30 * time.Second),
			LateWindow:        Duration(5 * time.Minute),
			MaxOpenChains:     1_000_000,
			CapabilityHorizon: Duration(15 * time.Minute),
		},
		Store: Store{
			Engine:    "embedded",
			SQLListen: "127.0.0.1:8123",
			Retention: Duration(30 * 24 * time.Hour),
			// Fifteen seconds rather than five: at 2,000 events/s two thirds of the parts and
			// merges, for SQL that sees records up to 15 s later (BENCHMARKS.md, "A
			// twenty-second session").
			FlushInterval: Duration(15 * time.Second),
		},
		Gate: Gate{
			Window:             Duration(10 * time.Minute),
			MaxProxied5xxRatio: 0.01,
			MinForwarded:       20,
			MaxIngestGap:       Duration(2 * time.Minute),
			MaxMinorSkew:       1,
			ForgetAfter:        Duration(30 * time.Minute),
		},
	}
}
