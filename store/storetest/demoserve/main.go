// Command demoserve loads audit data into an embedded store and serves its ClickHouse HTTP
// interface, so that `peertrail sql` and `peertrail report` (and Grafana, curl) can be tried
// and documented before, or without, a live control plane:
//
//	go run ./store/storetest/demoserve -listen 127.0.0.1:8123 &
//	peertrail report --since 24h
//
// It loads the real captures under test/testdata/real (audit webhook bodies of real
// kube-apiservers in each Mixed Version Proxy scenario, with the chains their labels imply) and,
// with -synthetic, a larger synthetic rolling upgrade in the last hour. The data is kept for
// MaxRetention, so old captures are not dropped by the TTL.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/peertrail/peertrail/ingest/record"
	"github.com/peertrail/peertrail/store"
	"github.com/peertrail/peertrail/store/storetest"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demoserve:", err)
		os.Exit(1)
	}
}

func run() error {
	listen := flag.String("listen", "127.0.0.1:8123", "address of the ClickHouse HTTP interface")
	dataDir := flag.String("data-dir", "", "engine data directory (default: a temporary one, removed at exit)")
	real := flag.String("real", storetest.RealDir, "directory of real captures (empty: none)")
	synthetic := flag.Bool("synthetic", false, "also load a synthetic MVP scenario in the last hour")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if *dataDir == "" {
		dir, err := os.MkdirTemp("", "peertrail-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		*dataDir = dir
	}
	s, err := store.OpenEmbedded(ctx, store.EmbeddedOptions{DataDir: *dataDir})
	if err != nil {
		return err
	}
	defer s.Close()
	if err := store.Migrate(ctx, s, store.SchemaOptions{Retention: store.MaxRetention, RollupRetention: store.MaxRetention}, log); err != nil {
		return err
	}
	codec, err := record.NewCodec()
	if err != nil {
		return err
	}
	defer codec.Close()
	w := store.NewWriter(s, codec, store.WriterOptions{Logger: log})
	load := func(name string, sc *storetest.Scenario) error {
		if err := w.WriteEvents(ctx, sc.Records); err != nil {
			return err
		}
		if err := w.WriteChains(ctx, sc.Chains); err != nil {
			return err
		}
		log.Info("loaded", "data", name, "records", len(sc.Records), "chains", len(sc.Chains))
		return nil
	}
	if *real != "" {
		c, err := storetest.LoadCaptures(*real)
		if err != nil {
			return err
		}
		if err := load("real captures "+*real, &c.Scenario); err != nil {
			return err
		}
	}
	if *synthetic {
		sc, err := storetest.Build(storetest.Options{Begin: time.Now().UTC().Add(-time.Hour), Duration: 50 * time.Minute, Background: 3000, Seed: 1})
		if err != nil {
			return err
		}
		if err := load("synthetic", sc); err != nil {
			return err
		}
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: store.NewHTTPHandler(s, store.HTTPOptions{Logger: log}), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		srv.Shutdown(context.Background())
	}()
	log.Info("serving the ClickHouse HTTP interface", "url", "http://"+ln.Addr().String())
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
