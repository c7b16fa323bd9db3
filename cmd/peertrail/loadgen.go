package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/peertrail/peertrail/loadgen"
)

type loadgenFlags struct {
	url         string
	apiservers  string
	rate        int
	batch       int
	duration    time.Duration
	warmup      time.Duration
	caFile      string
	insecureTLS bool
	tokenFile   string
	tokenDir    string
	certFile    string
	keyFile     string
	jsonOut     bool
	output      string
}

func newLoadgenCommand(_ *globalFlags) *cobra.Command {
	f := &loadgenFlags{}
	cmd := &cobra.Command{
		Use:   "loadgen",
		Short: "Post synthetic audit EventLists to a receiver at a fixed rate and report throughput and acknowledge latency",
		Long: `loadgen posts audit.k8s.io/v1 EventLists shaped like a kube-apiserver's (Metadata level,
ResponseComplete, realistic users, resources and annotations, every auditID unique) to
<url>/audit/<apiserver>, one sender per apiserver, on a fixed schedule (open loop: a slow
receiver does not slow the schedule, its latency shows). A batch answered 429 or 5xx with
Retry-After is posted again after that wait, up to 10 times, as the apiserver's webhook client
does; its latency runs from the first post. It reports accepted events per second, the answers
and retries, and the acknowledge latency distribution. Use it to size a deployment or to check a change.`,
		Example: `  peertrail loadgen --url https://peertrail:8443 --ca-file ca.crt --rate 10000 --duration 60s
  peertrail loadgen --url http://127.0.0.1:18443 --warmup 60s --duration 30s   # steady state`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(cmd, f.output); err != nil {
				return err
			}
			if f.jsonOut {
				f.output = "json"
			}
			if f.rate <= 0 || f.batch <= 0 || strings.TrimSpace(f.apiservers) == "" {
				return usageError(cmd, "--rate, --batch and --apiservers must be positive")
			}
			return runLoadgen(cmd.Context(), f, cmd.OutOrStdout())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.url, "url", "http://127.0.0.1:8443", "receiver base URL")
	fl.StringVar(&f.apiservers, "apiservers", "kas-a,kas-b,kas-c", "comma-separated apiserver names to send as")
	fl.IntVar(&f.rate, "rate", 10000, "events per second, over all apiservers")
	fl.IntVar(&f.batch, "batch", 400, "events per EventList (the apiserver's default batch size is 400)")
	fl.DurationVar(&f.duration, "duration", 30*time.Second, "how long to send and measure")
	fl.DurationVar(&f.warmup, "warmup", 0, "send at the same rate for this long first, without measuring: a receiver's first\n"+
		"minute (heap growing, the correlator's chain window filling) is slower than its steady state")
	fl.StringVar(&f.caFile, "ca-file", "", "CA bundle to verify the receiver's certificate")
	fl.BoolVar(&f.insecureTLS, "insecure-skip-tls-verify", false, "do not verify the receiver's certificate")
	fl.StringVar(&f.tokenFile, "token-file", "", "bearer token file (a token names one apiserver: with several, use --token-dir)")
	fl.StringVar(&f.tokenDir, "token-dir", "", "directory of the apiservers' own bearer tokens, a file per apiserver named after it (kas-a, or kas-a.token)")
	fl.StringVar(&f.certFile, "client-cert-file", "", "client certificate (PEM)")
	fl.StringVar(&f.keyFile, "client-key-file", "", "client certificate key (PEM)")
	fl.BoolVar(&f.jsonOut, "json", false, "same as -o json")
	fl.MarkHidden("json")
	addOutputFlag(cmd, &f.output)
	return cmd
}

// LoadResult is what loadgen measured.
type LoadResult = loadgen.Result

func runLoadgen(ctx context.Context, f *loadgenFlags, out io.Writer) error {
	names := strings.Split(f.apiservers, ",")
	if f.rate <= 0 || f.batch <= 0 || len(names) == 0 {
		return fmt.Errorf("--rate, --batch and --apiservers must be positive")
	}
	client, token, err := loadgenClient(f)
	if err != nil {
		return err
	}
	if err := probeReceiver(ctx, client, f.url, "--url"); err != nil {
		return err
	}
	var tokens map[string]string
	if f.tokenDir != "" {
		if tokens, err = readTokenDir(f.tokenDir); err != nil {
			return err
		}
	}
	res, err := loadgen.Run(ctx, loadgen.Options{
		URL: f.url, APIServers: names, Rate: f.rate, Batch: f.batch, Warmup: f.warmup, Duration: f.duration, Client: client,
		Token: func(name string) string {
			if t, ok := tokens[name]; ok {
				return t
			}
			return token
		},
	})
	if err != nil {
		return err
	}
	if f.output == "json" || f.output == "yaml" {
		b, err := json.Marshal(res)
		if err != nil {
			return err
		}
		if err := printJSON(out, f.output, b); err != nil {
			return err
		}
		return res.Err()
	}
	fmt.Fprintf(out, "sent %d events in %d batches over %.1fs; acknowledged %d (%.0f events/s)\n",
		res.EventsSent, res.Batches, res.Seconds, res.EventsAcked, res.AckedPerSec)
	fmt.Fprintf(out, "answers: %v; posted again on request (Retry-After): %d; batches sent late: %d\n", res.Codes, res.Retries, res.Late)
	fmt.Fprintf(out, "ack latency ms: p50 %.2f  p90 %.2f  p99 %.2f  max %.2f\n",
		res.LatencyP50ms, res.LatencyP90ms, res.LatencyP99ms, res.LatencyMaxms)
	return res.Err()
}

func loadgenClient(f *loadgenFlags) (*http.Client, string, error) {
	tc, err := clientTLS(f.caFile, f.insecureTLS, f.certFile, f.keyFile)
	if err != nil {
		return nil, "", err
	}
	var token string
	if f.tokenFile != "" {
		b, err := os.ReadFile(f.tokenFile)
		if err != nil {
			return nil, "", err
		}
		token = strings.TrimSpace(string(b))
	}
	tr := &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 64}
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}, token, nil
}
