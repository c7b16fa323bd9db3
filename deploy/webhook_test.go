package deploy

import (
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
)

func TestWebhookURL(t *testing.T) {
	for _, tc := range []struct{ base, want, err string }{
		{"https://10.96.0.240:8443", "https://10.96.0.240:8443/audit/cp-1", ""},
		{"https://10.96.0.240:8443/", "https://10.96.0.240:8443/audit/cp-1", ""},
		{"https://10.96.0.240:8443/audit/cp-1", "https://10.96.0.240:8443/audit/cp-1", ""},
		{"https://10.96.0.240:8443/audit/cp-2", "", "names apiserver \"cp-2\""},
		{"https://10.96.0.240:8443/other", "", "base URL"},
		{"http://10.96.0.240:8443", "", "want https"},
		{"https://10.96.0.240:8443?x=1", "", "no query"},
	} {
		got, err := WebhookURL(tc.base, "cp-1")
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err %v, want %q", tc.base, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: %q %v, want %q", tc.base, got, err, tc.want)
		}
	}
}

func TestBuildWebhookKubeconfig(t *testing.T) {
	o := WebhookOptions{APIServer: "cp-1", URL: "https://10.96.0.240:8443", CAFile: "/etc/kubernetes/peertrail/peertrail-ca.crt",
		ClientCertFile: "/etc/kubernetes/peertrail/audit-webhook-client.crt", ClientKeyFile: "/etc/kubernetes/peertrail/audit-webhook-client.key"}
	b, err := BuildWebhookKubeconfig(o)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.Load(b)
	if err != nil {
		t.Fatal(err)
	}
	ctx := cfg.Contexts[cfg.CurrentContext]
	cl, user := cfg.Clusters[ctx.Cluster], cfg.AuthInfos[ctx.AuthInfo]
	if cl.Server != "https://10.96.0.240:8443/audit/cp-1" || cl.CertificateAuthority != o.CAFile ||
		user.ClientCertificate != o.ClientCertFile || user.ClientKey != o.ClientKeyFile {
		t.Errorf("kubeconfig: cluster %+v user %+v", cl, user)
	}
	for name, bad := range map[string]WebhookOptions{
		"no auth":              {APIServer: "cp-1", URL: o.URL, CAFile: o.CAFile},
		"both auths":           {APIServer: "cp-1", URL: o.URL, CAFile: o.CAFile, ClientCertFile: "a", ClientKeyFile: "b", TokenFile: "t"},
		"no key":               {APIServer: "cp-1", URL: o.URL, CAFile: o.CAFile, ClientCertFile: "a"},
		"no CA":                {APIServer: "cp-1", URL: o.URL, TokenFile: "t"},
		"bad name":             {APIServer: "CP_1", URL: o.URL, CAFile: o.CAFile, TokenFile: "t"},
		"embed, missing files": {APIServer: "cp-1", URL: o.URL, CAFile: "/nonexistent/ca.crt", TokenFile: "t", Embed: true},
	} {
		if _, err := BuildWebhookKubeconfig(bad); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// The package's errors describe the option, not a command's flag: the CLI is one caller of many.
func TestWebhookErrorsNameNoFlags(t *testing.T) {
	for _, o := range []WebhookOptions{
		{APIServer: "CP_1", URL: "https://p:8443", CAFile: "ca"},
		{APIServer: "cp-1", URL: "http://p:8443", CAFile: "ca", TokenFile: "t"},
		{APIServer: "cp-1", URL: "https://p:8443", TokenFile: "t"},
		{APIServer: "cp-1", URL: "https://p:8443", CAFile: "ca"},
		{APIServer: "cp-1", URL: "https://p:8443", CAFile: "ca", ClientCertFile: "c"},
		{APIServer: "cp-1", URL: "https://p:8443", CAFile: "ca", ClientCertFile: "c", ClientKeyFile: "k", TokenFile: "t"},
		{APIServer: "cp-1", URL: "https://p:8443", CAFile: "/nonexistent/ca", TokenFile: "/nonexistent/t", Embed: true},
	} {
		_, err := BuildWebhookKubeconfig(o)
		if err == nil {
			t.Errorf("%+v: accepted", o)
			continue
		}
		if strings.Contains(err.Error(), "--") {
			t.Errorf("%+v: %v names a flag", o, err)
		}
	}
}
