package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/peertrail/peertrail/config"
	"github.com/peertrail/peertrail/server"
)

func newAgentCommand(g *globalFlags) *cobra.Command {
	cfg := config.Defaults()
	cfg.Listen = "127.0.0.1:8443"
	var configFile string
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run the node-local receiver of the HA layout: its apiserver's audit, relayed to every aggregator",
		Long: `agent is peertrail's HA layout's receiver on each control-plane node. Its kube-apiserver's
audit webhook posts to it on a loopback address (--listen, 127.0.0.1:8443 by default), as it
would to serve: the same authentication (the apiserver's client certificate or token), limits,
duplicate detection and dead letters, and a batch answered 200 only once it is fsynced into the
agent's spool under --data-dir.

The agent relays its spool to every aggregator (a peertrail serve with this agent in its
agents: list), in order, each at its own pace: a frame stays in the spool until every aggregator
has stored it, and where each aggregator is survives restarts of either side (the spool's
consumer ship-<aggregator>). When it has nothing to send it posts a heartbeat every second, with
how far its spool goes, so that an aggregator knows whether it is behind.

An aggregator away for longer than the spool can hold (--spool-max-bytes at the rate of the
audit): when the spool holds --relay-give-up-at of its limit and that aggregator's backlog is the
largest, its oldest frames are given up (counted in peertrail_agent_ship_skipped_events_total,
logged, told to every aggregator, whose gate check agent_spool pauses while it is in the window),
so the apiserver's audit is never refused for it.

Endpoints: POST /audit/<apiserver> (the webhook), GET /healthz, GET /readyz (the spool takes
batches), GET /metrics (readers only; --api-listen to serve it on another address).

Settings come from flags and an optional YAML file (--config), as serve's:

  apiservers:
  - name: cp-1                   # the apiserver on this node
    certSubject: audit-webhook-cp-1
  relay:
    aggregators:
    - {name: agg-0, url: https://peertrail-aggregator-0.peertrail-aggregator.peertrail.svc:8443}
    - {name: agg-1, url: https://peertrail-aggregator-1.peertrail-aggregator.peertrail.svc:8443}
    caFile: /etc/peertrail/ca.crt            # verifies the aggregators
    tokenFile: /etc/kubernetes/peertrail/agent.token   # or certFile + keyFile
    giveUpAt: 0.9`,
		Example: `  peertrail agent --config /etc/kubernetes/peertrail/agent.yaml --data-dir /var/lib/peertrail-agent \
    --tls-cert-file tls.crt --tls-key-file tls.key --client-ca-file apiserver-audit-ca.crt \
    --aggregator agg-0=https://10.0.0.21:8443,agg-1=https://10.0.0.22:8443 \
    --relay-ca-file ca.crt --relay-token-file agent.token --reader-token-file readers.tokens`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := applyConfigFile(cmd.Flags(), configFile, &cfg); err != nil {
				return errorf(exitUsage, "see peertrail agent --help", "%v", oneLine(err.Error()))
			}
			// An agent keeps no store: the aggregators do.
			cfg.Store.Engine, cfg.Store.SQLListen = "none", ""
			if err := cfg.ValidateRelay(); err != nil {
				return errorf(exitUsage, "see peertrail agent --help", "%v", oneLine(err.Error()))
			}
			log, err := g.logger()
			if err != nil {
				return usageError(cmd, "%v", err)
			}
			if err := preflight(cfg); err != nil {
				return err
			}
			for _, f := range []struct{ flag, path string }{{"--relay-ca-file", cfg.Relay.CAFile}, {"--relay-token-file", cfg.Relay.TokenFile},
				{"--relay-client-cert", cfg.Relay.CertFile}, {"--relay-client-key", cfg.Relay.KeyFile}} {
				if f.path == "" {
					continue
				}
				if _, err := os.Stat(f.path); err != nil {
					return errorf(exitUsage, "see peertrail agent --help", "%s: %v", f.flag, err)
				}
			}
			// As serve: an acknowledgement that becomes runnable gets a P of its own at once,
			// rather than waiting for the shippers or the collector to yield one.
			if procs, set := server.WidenScheduler(); set {
				log.Debug("Go scheduler widened", "gomaxprocs", procs)
			}
			srv, err := server.NewAgent(cmd.Context(), cfg, log)
			if err != nil {
				return addrInUse(err)
			}
			return addrInUse(srv.Run(cmd.Context()))
		},
	}
	f := cmd.Flags()
	f.StringVar(&configFile, "config", "", "YAML configuration file (apiservers, relay: aggregators and credentials, limits); flags given on the command line win over it")
	bindIngestFlags(f, &cfg)
	f.Var((*aggregatorList)(&cfg.Relay.Aggregators), "aggregator", "comma-separated aggregators to relay to, each name=https://host:port (its --listen)")
	f.StringVar(&cfg.Relay.CAFile, "relay-ca-file", "", "CA bundle that verifies the aggregators' serving certificates")
	f.StringVar(&cfg.Relay.TokenFile, "relay-token-file", "", "file holding this agent's bearer token for the aggregators (their agents[].tokenFile)")
	f.StringVar(&cfg.Relay.CertFile, "relay-client-cert", "", "this agent's client certificate for the aggregators (their agents[].certSubject)")
	f.StringVar(&cfg.Relay.KeyFile, "relay-client-key", "", "the client certificate's key")
	f.Float64Var(&cfg.Relay.GiveUpAt, "relay-give-up-at", 0, "share of --spool-max-bytes at which the oldest frames of the aggregator whose backlog holds the spool are given up (default 0.9)")
	f.Var(&cfg.Relay.MaxRequestBytes, "relay-max-request-bytes", "frames' bytes of one request to an aggregator (default 4Mi)")
	return cmd
}

// aggregatorList is --aggregator: name=url,name=url. Set replaces the list, so that
// applyConfigFile's re-setting of a flag from its String gives the same list.
type aggregatorList []config.Aggregator

func (l *aggregatorList) String() string {
	parts := make([]string, len(*l))
	for i, a := range *l {
		parts[i] = a.Name + "=" + a.URL
	}
	return strings.Join(parts, ",")
}

func (l *aggregatorList) Type() string { return "aggregators" }

func (l *aggregatorList) Set(v string) error {
	*l = nil
	for _, e := range strings.Split(v, ",") {
		if e = strings.TrimSpace(e); e == "" {
			continue
		}
		name, u, ok := strings.Cut(e, "=")
		if !ok || name == "" || u == "" {
			return fmt.Errorf("%q: want name=https://host:port", e)
		}
		*l = append(*l, config.Aggregator{Name: name, URL: u})
	}
	return nil
}
