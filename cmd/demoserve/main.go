// Command demoserve is a documentation tool, not part of what peertrail ships: it runs captured
// audit traffic through peertrail's pipeline (spool, correlator, store writer) into an embedded
// store and serves its ClickHouse HTTP interface, so that `peertrail sql` and `peertrail report`
// (and Grafana, curl) can be tried and documented without a live control plane (INVESTIGATION.md
// is its output). `peertrail demo` is the user's demo; this one loads the test captures
// (test/storetest), which is why it lives beside peertrail's command rather than in it:
//
//	go run ./cmd/demoserve -listen 127.0.0.1:8123 &
//	peertrail report --since 24h
//
// It loads the real captures under test/testdata/real (the audit webhook bodies real
// kube-apiservers sent in each Mixed Version Proxy scenario) and, with -synthetic, a larger
// synthetic rolling upgrade in the last hour. Each webhook body is decoded and spooled as the
// receiver does, in the order peertrail received it; the correlator (correlate.Correlator)
// joins and classifies the chains and hands them to the store's chain sink, as in serve. The
// data is kept for store.MaxRetention, so old captures are not dropped by the TTL.
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
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/peertrail/peertrail/correlate"
	"github.com/peertrail/peertrail/ingest/record"
	"github.com/peertrail/peertrail/ingest/spool"
	"github.com/peertrail/peertrail/store"
	"github.com/peertrail/peertrail/store/sqlhttp"
	"github.com/peertrail/peertrail/test/storetest"
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
	var posts []storetest.Post
	if *real != "" {
		c, err := storetest.LoadCaptures(*real)
		if err != nil {
			return err
		}
		posts = append(posts, c.Posts...)
	}
	if *synthetic {
		sc, err := storetest.Build(storetest.Options{Begin: time.Now().UTC().Add(-time.Hour), Duration: 50 * time.Minute, Background: 3000, Seed: 1})
		if err != nil {
			return err
		}
		posts = append(posts, sc.Posts...)
	}
	sort.SliceStable(posts, func(i, j int) bool { return posts[i].ReceivedAt.Before(posts[j].ReceivedAt) })
	if err := pipeline(ctx, log, s, codec, posts); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	h, err := sqlhttp.NewHandler(ctx, s, sqlhttp.Options{Logger: log})
	if err != nil {
		ln.Close()
		return err
	}
	defer h.Close()
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
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

// pipeline spools the posts as the receiver would and runs the store writer and the correlator
// over them until both have consumed everything and every chain is final and stored.
func pipeline(ctx context.Context, log *slog.Logger, s store.Store, codec *record.Codec, posts []storetest.Post) error {
	dir, err := os.MkdirTemp("", "peertrail-demo-spool-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	sp, err := spool.Open(spool.Options{Dir: dir, MaxBytes: 1 << 34, Sync: spool.SyncNever,
		Consumers: []string{store.ConsumerName, correlate.ConsumerName}, Logger: log})
	if err != nil {
		return err
	}
	defer sp.Close()
	records := 0
	for _, p := range posts {
		recs, _, err := record.Decode(p.Body, p.APIServer, p.ReceivedAt)
		if err != nil {
			return err
		}
		keys := make([]record.Key, len(recs))
		for i := range recs {
			keys[i] = recs[i].Key()
		}
		frame, err := codec.AppendFrame(nil, p.APIServer, p.ReceivedAt, recs, keys)
		if err != nil {
			return err
		}
		if _, err := sp.Append(frame); err != nil {
			return err
		}
		records += len(recs)
	}
	w := store.NewWriter(s, codec, store.WriterOptions{Logger: log})
	co := correlate.New(correlate.Config{
		Join: correlate.DefaultJoinOptions(), Codec: codec, Caps: correlate.NewCapabilities(15 * time.Minute), Sink: w, Log: log,
	})
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, 2)
	opts := spool.RunOptions{Idle: 50 * time.Millisecond, CommitEvery: 10 * time.Millisecond}
	for name, c := range map[string]spool.Consumer{store.ConsumerName: w, correlate.ConsumerName: co} {
		wg.Go(func() {
			if err := sp.Run(rctx, name, c, opts); err != nil {
				errc <- fmt.Errorf("%s: %w", name, err)
			}
		})
	}
	start := time.Now()
	for {
		st := sp.Stats()
		if st.Lag[store.ConsumerName] == 0 && st.Lag[correlate.ConsumerName] == 0 {
			break
		}
		select {
		case err := <-errc:
			return err
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	cancel()
	wg.Wait()
	log.Info("loaded through the pipeline", "posts", len(posts), "records", records, "took", time.Since(start).Round(time.Millisecond))
	return nil
}
