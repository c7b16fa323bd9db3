package deploy

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// WebhookOptions describe one kube-apiserver's audit webhook kubeconfig.
type WebhookOptions struct {
	// APIServer is the apiserver's name in peertrail (config apiservers[].name): the last
	// element of its webhook URL.
	APIServer string
	// URL is peertrail's base URL as the apiserver reaches it (https://10.96.0.240:8443), or
	// the full webhook URL ending in /audit/<APIServer>.
	URL string
	// CAFile verifies peertrail's serving certificate.
	CAFile string
	// ClientCertFile and ClientKeyFile: the apiserver's client certificate for peertrail
	// (its subject is the apiserver's certSubject in peertrail's config).
	ClientCertFile, ClientKeyFile string
	// TokenFile holds this apiserver's own bearer token, the one its apiservers[].tokenFile
	// in peertrail's config holds (instead of a client certificate); peertrail accepts it for
	// this apiserver only.
	TokenFile string
	// Embed puts the files' contents in the kubeconfig instead of their paths.
	Embed bool
}

var apiserverNameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$`)

// WebhookURL is the URL apiserver posts to: base + /audit/<apiserver>, or base itself when it
// already names this apiserver.
func WebhookURL(base, apiserver string) (string, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", fmt.Errorf("peertrail URL: %w", err)
	}
	if u.Scheme != "https" || u.Host == "" {
		return "", fmt.Errorf("peertrail URL %q: want https://HOST[:PORT] (the apiserver's webhook speaks TLS; peertrail serves plain HTTP only on loopback)", base)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("peertrail URL %q: no query or fragment", base)
	}
	switch p := strings.TrimRight(u.Path, "/"); {
	case p == "":
		u.Path = "/audit/" + apiserver
	case p == "/audit/"+apiserver:
		u.Path = p
	case strings.HasPrefix(p, "/audit/"):
		return "", fmt.Errorf("peertrail URL %q names apiserver %q, not %q", base, strings.TrimPrefix(p, "/audit/"), apiserver)
	default:
		return "", fmt.Errorf("peertrail URL %q: give peertrail's base URL (https://HOST:PORT) or .../audit/%s", base, apiserver)
	}
	return u.String(), nil
}

// BuildWebhookKubeconfig returns the kubeconfig for --audit-webhook-config-file.
//
// Its errors name what is wrong in words (the peertrail URL, the CA file, the client
// certificate), not the flags of a command: the command that calls it says which flag that is.
func BuildWebhookKubeconfig(o WebhookOptions) ([]byte, error) {
	if !apiserverNameRE.MatchString(o.APIServer) {
		return nil, fmt.Errorf("apiserver name %q: want a lowercase DNS-like name (what peertrail's config lists)", o.APIServer)
	}
	server, err := WebhookURL(o.URL, o.APIServer)
	if err != nil {
		return nil, err
	}
	if o.CAFile == "" {
		return nil, errors.New("a CA file is required: the CA bundle that verifies peertrail's serving certificate")
	}
	certAuth := o.ClientCertFile != "" || o.ClientKeyFile != ""
	switch {
	case certAuth && o.TokenFile != "":
		return nil, errors.New("give either a client certificate and key or a token file, not both")
	case certAuth && (o.ClientCertFile == "" || o.ClientKeyFile == ""):
		return nil, errors.New("a client certificate and its key go together")
	case !certAuth && o.TokenFile == "":
		return nil, errors.New("give a client certificate and key (recommended: names the apiserver by its certificate) or a token file: peertrail refuses unauthenticated batches")
	}

	cluster := clientcmdapi.NewCluster()
	cluster.Server = server
	user := clientcmdapi.NewAuthInfo()
	if o.Embed {
		ca, err := readPEM(o.CAFile, "CERTIFICATE")
		if err != nil {
			return nil, fmt.Errorf("CA file: %w", err)
		}
		cluster.CertificateAuthorityData = ca
		if certAuth {
			if user.ClientCertificateData, err = os.ReadFile(o.ClientCertFile); err != nil {
				return nil, fmt.Errorf("client certificate: %w", err)
			}
			if user.ClientKeyData, err = os.ReadFile(o.ClientKeyFile); err != nil {
				return nil, fmt.Errorf("client key: %w", err)
			}
			if _, err := tls.X509KeyPair(user.ClientCertificateData, user.ClientKeyData); err != nil {
				return nil, fmt.Errorf("client certificate and key: %w", err)
			}
		} else {
			tok, err := os.ReadFile(o.TokenFile)
			if err != nil {
				return nil, fmt.Errorf("token file: %w", err)
			}
			if user.Token = strings.TrimSpace(string(tok)); user.Token == "" {
				return nil, fmt.Errorf("token file %s is empty", o.TokenFile)
			}
		}
	} else {
		// Paths as the kube-apiserver sees them (usually files on the control-plane node, not
		// here): checked when they exist on this machine.
		cluster.CertificateAuthority = o.CAFile
		if _, err := os.Stat(o.CAFile); err == nil {
			if _, err := readPEM(o.CAFile, "CERTIFICATE"); err != nil {
				return nil, fmt.Errorf("CA file: %w", err)
			}
		}
		if certAuth {
			user.ClientCertificate, user.ClientKey = o.ClientCertFile, o.ClientKeyFile
			if exists(o.ClientCertFile) && exists(o.ClientKeyFile) {
				if _, err := tls.LoadX509KeyPair(o.ClientCertFile, o.ClientKeyFile); err != nil {
					return nil, fmt.Errorf("client certificate and key: %w", err)
				}
			}
		} else {
			user.TokenFile = o.TokenFile
		}
	}

	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["peertrail"] = cluster
	cfg.AuthInfos[o.APIServer] = user
	ctx := clientcmdapi.NewContext()
	ctx.Cluster, ctx.AuthInfo = "peertrail", o.APIServer
	cfg.Contexts["peertrail"] = ctx
	cfg.CurrentContext = "peertrail"
	out, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, err
	}
	header := fmt.Sprintf("# Audit webhook of kube-apiserver %q -> peertrail (%s).\n"+
		"# Written by `peertrail deploy webhook-config`; kube-apiserver reads it with\n"+
		"# --audit-webhook-config-file (see deploy/README.md).\n", o.APIServer, server)
	return append([]byte(header), out...), nil
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// readPEM reads a file that must hold at least one PEM block of type typ (and, for
// certificates, parse).
func readPEM(path, typ string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	rest, n := b, 0
	for {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		if blk.Type != typ {
			continue
		}
		if typ == "CERTIFICATE" {
			if _, err := x509.ParseCertificate(blk.Bytes); err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
		}
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("%s holds no PEM %s", path, typ)
	}
	return b, nil
}
