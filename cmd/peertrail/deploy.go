package main

import (
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/peertrail/peertrail/deploy"
	"github.com/peertrail/peertrail/store"
)

func newDeployCommand(_ *globalFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "deploy",
		Short: "Write what the control plane needs to feed peertrail (webhook kubeconfig, audit policy)",
		Long: `deploy writes the files that connect a control plane to peertrail: each kube-apiserver's
audit webhook kubeconfig and the audit policy. The Kustomize base and overlays, the
kube-apiserver flags per version and the runbook are in the repository's deploy/ directory.`,
		Args: noArgs,
		RunE: group,
	}
	cmd.AddCommand(newDeployWebhookConfigCommand(), newDeployAuditPolicyCommand(), newDeployGenerateCommand(), newDeployClickHouseInitCommand(), newDeployAPIServerMonitorCommand())
	return cmd
}

func newDeployWebhookConfigCommand() *cobra.Command {
	var o deploy.WebhookOptions
	var out string
	cmd := &cobra.Command{
		Use:   "webhook-config --apiserver NAME --url URL --ca FILE (--client-cert FILE --client-key FILE | --token-file FILE) [-o FILE]",
		Short: "Write one kube-apiserver's audit webhook kubeconfig (--audit-webhook-config-file)",
		Long: `webhook-config writes the kubeconfig a kube-apiserver's audit webhook backend uses to post its
events to peertrail. Write one per apiserver: its URL ends in /audit/<NAME>, the name
peertrail's config lists it under, because a webhook POST does not otherwise say which
apiserver sent it; and give each apiserver its own client certificate, whose subject is that
apiserver's certSubject in peertrail's config (peertrail refuses a batch whose certificate
names another apiserver than its URL).

--url is peertrail's address as the apiserver reaches it. A kube-apiserver static pod uses the
node's DNS, not the cluster's, so give an IP: the fixed ClusterIP of peertrail's Service
(deploy/base/service.yaml), which peertrail's serving certificate must name.

The files are referred to by path, as the kube-apiserver sees them (on the control-plane node,
mounted into its pod); they are checked when they exist here. --embed-certs puts their
contents in the kubeconfig instead.`,
		Example: `  peertrail deploy webhook-config --apiserver cp-1 --url https://10.96.0.240:8443 \
    --ca /etc/kubernetes/peertrail/peertrail-ca.crt \
    --client-cert /etc/kubernetes/peertrail/audit-webhook-client.crt \
    --client-key /etc/kubernetes/peertrail/audit-webhook-client.key \
    -o /etc/kubernetes/peertrail/audit-webhook.kubeconfig`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := deploy.BuildWebhookKubeconfig(o)
			if err != nil {
				return err
			}
			return writeOut(cmd, out, b, 0o600)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.APIServer, "apiserver", "", "the apiserver's name in peertrail's config (the last element of its webhook URL)")
	f.StringVar(&o.URL, "url", "", "peertrail's base URL as the apiserver reaches it (https://IP:8443), or the full .../audit/NAME URL")
	f.StringVar(&o.CAFile, "ca", "", "CA bundle that verifies peertrail's serving certificate")
	f.StringVar(&o.ClientCertFile, "client-cert", "", "the apiserver's client certificate for peertrail")
	f.StringVar(&o.ClientKeyFile, "client-key", "", "its private key")
	f.StringVar(&o.TokenFile, "token-file", "", "file holding this apiserver's own bearer token, the one its apiservers[].tokenFile in peertrail's config holds\n"+
		"(instead of a client certificate; valid for this apiserver only)")
	f.BoolVar(&o.Embed, "embed-certs", false, "put the CA, certificate, key (or token) in the kubeconfig instead of their paths")
	f.StringVarP(&out, "output", "o", "", "file to write (default: standard output)")
	for _, n := range []string{"apiserver", "url", "ca"} {
		_ = cmd.MarkFlagRequired(n)
	}
	return cmd
}

func newDeployAPIServerMonitorCommand() *cobra.Command {
	var (
		pairs     []string
		namespace string
		out       string
	)
	cmd := &cobra.Command{
		Use:   "apiserver-monitor --apiserver NAME=ADDRESS ... [--namespace NS] [-o FILE]",
		Short: "Write a ServiceMonitor that scrapes the kube-apiservers with peertrail's names as their apiserver label",
		Long: `apiserver-monitor writes a prometheus-operator ServiceMonitor that scrapes every kube-apiserver
behind the default/kubernetes Service (the endpoints are the apiservers' --advertise-address)
and sets the label apiserver on each target to the name peertrail knows it by (the <NAME> of
its webhook URL /audit/<NAME>). The ingest-gap and webhook-error alerts and the MVP rollout
dashboard join the apiservers' own metrics (apiserver_audit_event_total,
apiserver_audit_error_total, apiserver_rerouted_request_total, ...) with peertrail's on that
label; without it they see nothing. List every apiserver, and regenerate when one is replaced.

Prometheus needs RBAC to read /metrics of the apiservers (kube-prometheus grants it); the
ServiceMonitor authenticates with Prometheus' service account token.`,
		Example: `  peertrail deploy apiserver-monitor --apiserver cp-1=10.0.0.11 --apiserver cp-2=10.0.0.12 \
    --apiserver cp-3=10.0.0.13 --namespace monitoring | kubectl apply -f -`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			targets, err := deploy.ParseAPIServerTargets(pairs)
			if err != nil {
				return err
			}
			b, err := deploy.APIServerMonitor(namespace, targets)
			if err != nil {
				return err
			}
			return writeOut(cmd, out, b, 0o644)
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&pairs, "apiserver", nil, "NAME=ADDRESS: peertrail's name for an apiserver and its advertise address (repeat for each)")
	f.StringVar(&namespace, "namespace", "monitoring", "namespace of the ServiceMonitor (one your Prometheus selects)")
	f.StringVarP(&out, "output", "o", "", "file to write (default: standard output)")
	_ = cmd.MarkFlagRequired("apiserver")
	return cmd
}

func newDeployAuditPolicyCommand() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "audit-policy [-o FILE]",
		Short: "Write the audit policy for the kube-apiservers (--audit-policy-file)",
		Long: `audit-policy writes deploy/control-plane/audit-policy.yaml, the audit policy tuned for
peertrail: Metadata level for what it joins, no request or response bodies (secrets and tokens
never), RequestReceived kept only for writes, and health checks, Events, node and
leader-election leases and reads of core resources dropped. Its comments say why.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return writeOut(cmd, out, deploy.AuditPolicy, 0o644)
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "file to write (default: standard output)")
	return cmd
}

func newDeployGenerateCommand() *cobra.Command {
	var root string
	cmd := &cobra.Command{
		Use:   "generate [--root DIR]",
		Short: "Regenerate deploy/'s generated files (apiserver flags, copies of alert rules and dashboards)",
		Long: `generate rewrites the generated files under deploy/: the kube-apiserver flags per version
(static-pod arguments and kubeadm ClusterConfiguration patches, from deploy/controlplane.go)
and the copies of alerts/generated/prometheusrule.yaml and dashboards/generated/*.json that
the Kustomize monitoring component reads (Kustomize reads only files inside a kustomization's
directory). Run it from the repository root after changing any of them; a test fails while
the committed files differ.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if root == "" {
				wd, err := os.Getwd()
				if err != nil {
					return err
				}
				if root, err = deploy.RepoRoot(wd); err != nil {
					return err
				}
			}
			paths, err := deploy.Generate(root)
			return printWritten(cmd.OutOrStdout(), paths, err)
		},
	}
	cmd.Flags().StringVar(&root, "root", "", "repository root (default: found above the working directory)")
	return cmd
}

func newDeployClickHouseInitCommand() *cobra.Command {
	var out string
	var retentionDays int
	cmd := &cobra.Command{
		Use:   "clickhouse-initdb -o FILE",
		Short: "Write the store's DDL for a ClickHouse server's /docker-entrypoint-initdb.d",
		Long: `clickhouse-initdb writes the DDL of peertrail schema (single server) to a file, for the
init container of the ClickHouse StatefulSet in deploy/overlays/clickhouse: the server applies
it at every start (each statement is idempotent), so the schema matches the peertrail image
that wrote it.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ddl, err := store.DDL(store.SchemaOptions{Retention: daysDuration(retentionDays)})
			if err != nil {
				return err
			}
			return writeOut(cmd, out, []byte(ddl), 0o644)
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "file to write (default: standard output)")
	cmd.Flags().IntVar(&retentionDays, "retention-days", int(store.DefaultRetention.Hours()/24), "days to keep events, chains and the auditID lookup")
	return cmd
}

func writeOut(cmd *cobra.Command, path string, b []byte, mode os.FileMode) error {
	if path == "" || path == "-" {
		_, err := cmd.OutOrStdout().Write(b)
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func daysDuration(days int) time.Duration { return time.Duration(days) * 24 * time.Hour }
