package ingest

import (
	"crypto/subtle"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
)

// Role is what a request's credential allows.
type Role int

const (
	// Anonymous: no credential was presented.
	Anonymous Role = iota
	// Sender: an apiserver's client certificate or token; it may post audit batches as that
	// apiserver and nothing else.
	Sender
	// Reader: a reader's client certificate or token; it may read (metrics, chains, gate,
	// apiservers, pprof) and never post.
	Reader
	// Invalid: a credential was presented but is not known, or two credentials disagree.
	Invalid
	// Agent: a peertrail agent's client certificate or token (the HA layout); it may relay
	// its spool frames to an aggregator, for its own apiservers only, and nothing else.
	Agent
)

func (r Role) String() string {
	switch r {
	case Sender:
		return "apiserver"
	case Reader:
		return "reader"
	case Invalid:
		return "invalid"
	case Agent:
		return "agent"
	}
	return "anonymous"
}

// Identity is who a request is, as far as its credentials say.
type Identity struct {
	Role Role
	// APIServer is the apiserver a Sender credential names; "" for a verified apiserver
	// certificate whose subject maps to no apiserver or agent.
	APIServer string
	// Agent is the agent an Agent credential names.
	Agent string
	// Subject is the client certificate's subject, when one was verified.
	Subject string
	// Reason says why the credential is Invalid.
	Reason string
}

// NamedToken is a bearer token that authenticates one apiserver.
type NamedToken struct {
	APIServer string
	Token     string
}

// AgentToken is a bearer token that authenticates one peertrail agent.
type AgentToken struct {
	Agent string
	Token string
}

// AuthOptions configure an Authenticator.
type AuthOptions struct {
	// SenderCAs verify the apiservers' client certificates (the receiver's --client-ca-file).
	SenderCAs []*x509.Certificate
	// ReaderCAs verify the readers' client certificates (--reader-client-ca-file).
	ReaderCAs []*x509.Certificate
	// CertSubjects maps an apiserver certificate's subject (its common name, or the whole
	// subject as "CN=...,O=...") to the apiserver it identifies.
	CertSubjects map[string]string
	// SenderTokens are the apiservers' bearer tokens, one apiserver each.
	SenderTokens []NamedToken
	// ReaderTokens are the readers' bearer tokens.
	ReaderTokens []string
	// AgentSubjects maps an agent certificate's subject (signed by SenderCAs, like an
	// apiserver's) to the agent it identifies; AgentTokens are the agents' bearer tokens.
	AgentSubjects map[string]string
	AgentTokens   []AgentToken
}

// Authenticator tells apiservers from readers from strangers by their credentials. A client
// certificate is classed by the root its verified chain ends in (the TLS handshake has already
// verified it against the union of both CA sets: tls.VerifyClientCertIfGiven), a bearer token by
// constant-time comparison with every configured token. It is immutable once made and safe for
// concurrent use.
type Authenticator struct {
	senderRoots, readerRoots map[string]bool // raw DER of the CA certificates
	certSubjects             map[string]string
	senderTokens             []NamedToken
	readerTokens             []string
	agentSubjects            map[string]string
	agentTokens              []AgentToken
}

// NewAuthenticator checks o and returns its Authenticator. A CA in both sets, a token used
// twice, an empty token or a token for two apiservers are errors: each credential must say one
// thing.
func NewAuthenticator(o AuthOptions) (*Authenticator, error) {
	a := &Authenticator{senderRoots: map[string]bool{}, readerRoots: map[string]bool{}, certSubjects: o.CertSubjects}
	for _, c := range o.SenderCAs {
		a.senderRoots[string(c.Raw)] = true
	}
	for _, c := range o.ReaderCAs {
		if a.senderRoots[string(c.Raw)] {
			return nil, fmt.Errorf("the CA %q verifies both apiservers (--client-ca-file) and readers (--reader-client-ca-file): use a separate CA for readers, or an apiserver's certificate could read and a reader's could post", c.Subject)
		}
		a.readerRoots[string(c.Raw)] = true
	}
	seen := map[string]string{}
	for _, t := range o.SenderTokens {
		if t.Token == "" {
			return nil, fmt.Errorf("apiserver %s: empty token", t.APIServer)
		}
		if other, ok := seen[t.Token]; ok {
			return nil, fmt.Errorf("apiservers %s and %s have the same token: give each apiserver its own", other, t.APIServer)
		}
		seen[t.Token] = "apiserver " + t.APIServer
	}
	for i, t := range o.ReaderTokens {
		if t == "" {
			return nil, fmt.Errorf("reader token %d is empty", i+1)
		}
		if other, ok := seen[t]; ok {
			return nil, fmt.Errorf("reader token %d is also the token of %s: readers and apiservers need different tokens", i+1, other)
		}
		seen[t] = "a reader"
	}
	for _, t := range o.AgentTokens {
		if t.Token == "" {
			return nil, fmt.Errorf("agent %s: empty token", t.Agent)
		}
		if other, ok := seen[t.Token]; ok {
			return nil, fmt.Errorf("agent %s has the token of %s: give each agent its own token", t.Agent, other)
		}
		seen[t.Token] = "agent " + t.Agent
	}
	for subj, agent := range o.AgentSubjects {
		if n, ok := o.CertSubjects[subj]; ok {
			return nil, fmt.Errorf("certificate subject %q names both apiserver %s and agent %s", subj, n, agent)
		}
	}
	a.senderTokens, a.readerTokens = o.SenderTokens, o.ReaderTokens
	a.agentSubjects, a.agentTokens = o.AgentSubjects, o.AgentTokens
	return a, nil
}

// HasSenderCredentials reports whether any apiserver credential (CA or token) is configured.
func (a *Authenticator) HasSenderCredentials() bool {
	return len(a.senderRoots) > 0 || len(a.senderTokens) > 0
}

// HasAgentCredentials reports whether any agent credential (a certificate subject or a token)
// is configured.
func (a *Authenticator) HasAgentCredentials() bool {
	return len(a.agentSubjects) > 0 || len(a.agentTokens) > 0
}

// HasReaderCredentials reports whether any reader credential (CA or token) is configured.
func (a *Authenticator) HasReaderCredentials() bool {
	return len(a.readerRoots) > 0 || len(a.readerTokens) > 0
}

// Identify returns who r is. A client certificate and a bearer token together must agree.
func (a *Authenticator) Identify(r *http.Request) Identity {
	cert := a.certIdentity(r)
	tok, hasTok := a.tokenIdentity(r)
	switch {
	case !hasTok:
		return cert
	case cert.Role == Anonymous:
		return tok
	case tok.Role == Invalid:
		return tok
	case cert.Role != tok.Role || cert.APIServer != tok.APIServer || cert.Agent != tok.Agent:
		return Identity{Role: Invalid, Subject: cert.Subject,
			Reason: fmt.Sprintf("the client certificate (%s) and the bearer token (%s) disagree", describe(cert), describe(tok))}
	}
	return cert
}

func describe(id Identity) string {
	if id.Role == Sender && id.APIServer != "" {
		return "apiserver " + id.APIServer
	}
	if id.Role == Agent {
		return "agent " + id.Agent
	}
	return id.Role.String()
}

// certIdentity classes a verified client certificate by its chain's root.
func (a *Authenticator) certIdentity(r *http.Request) Identity {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return Identity{}
	}
	leaf := r.TLS.PeerCertificates[0]
	subject := leaf.Subject.String()
	if len(r.TLS.VerifiedChains) == 0 {
		// Only when the server asked for no verification; never trust an unverified one.
		return Identity{Role: Invalid, Subject: subject, Reason: "the client certificate was not verified"}
	}
	var sender, reader bool
	for _, chain := range r.TLS.VerifiedChains {
		root := chain[len(chain)-1].Raw
		sender = sender || a.senderRoots[string(root)]
		reader = reader || a.readerRoots[string(root)]
	}
	switch {
	case reader && !sender:
		return Identity{Role: Reader, Subject: subject}
	case sender && !reader:
		if n, ok := a.certSubjects[subject]; ok {
			return Identity{Role: Sender, APIServer: n, Subject: subject}
		}
		if n, ok := a.certSubjects[leaf.Subject.CommonName]; ok {
			return Identity{Role: Sender, APIServer: n, Subject: subject}
		}
		if n, ok := a.agentSubjects[subject]; ok {
			return Identity{Role: Agent, Agent: n, Subject: subject}
		}
		if n, ok := a.agentSubjects[leaf.Subject.CommonName]; ok {
			return Identity{Role: Agent, Agent: n, Subject: subject}
		}
		return Identity{Role: Sender, Subject: subject}
	}
	return Identity{Role: Invalid, Subject: subject, Reason: "the client certificate's CA is neither the apiservers' nor the readers'"}
}

// tokenIdentity classes the bearer token, if any. Every configured token is compared, in
// constant time each, so the time taken does not say which one came close.
func (a *Authenticator) tokenIdentity(r *http.Request) (Identity, bool) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return Identity{}, false
	}
	scheme, tok, ok := strings.Cut(h, " ")
	tok = strings.TrimSpace(tok)
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return Identity{Role: Invalid, Reason: "the Authorization header is not a bearer token"}, true
	}
	b := []byte(tok)
	found := Identity{Role: Invalid, Reason: "unknown bearer token"}
	for _, t := range a.senderTokens {
		if subtle.ConstantTimeCompare(b, []byte(t.Token)) == 1 {
			found = Identity{Role: Sender, APIServer: t.APIServer}
		}
	}
	for _, t := range a.readerTokens {
		if subtle.ConstantTimeCompare(b, []byte(t)) == 1 {
			found = Identity{Role: Reader}
		}
	}
	for _, t := range a.agentTokens {
		if subtle.ConstantTimeCompare(b, []byte(t.Token)) == 1 {
			found = Identity{Role: Agent, Agent: t.Agent}
		}
	}
	return found, true
}

// Readers wraps h so that only Reader credentials reach it: no credential is 401 (with
// WWW-Authenticate), an apiserver's credential 403, an invalid one 401. When no reader
// credential is configured at all, every request is refused (403) with a hint naming the flags:
// reads are never open to whoever reaches the port.
func (a *Authenticator) Readers(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := a.Identify(r)
		switch {
		case id.Role == Reader:
			h.ServeHTTP(w, r)
			return
		case !a.HasReaderCredentials():
			refuse(w, http.StatusForbidden, "reading is disabled: no reader credential is configured; give peertrail serve --reader-token-file or --reader-client-ca-file and present one")
		case id.Role == Sender:
			refuse(w, http.StatusForbidden, "an apiserver's credential may only post audit batches; reading needs a reader credential (--reader-token-file or --reader-client-ca-file)")
		case id.Role == Agent:
			refuse(w, http.StatusForbidden, "an agent's credential may only relay its frames; reading needs a reader credential (--reader-token-file or --reader-client-ca-file)")
		case id.Role == Invalid:
			refuse(w, http.StatusUnauthorized, "unauthenticated: "+id.Reason+"; reading needs a reader token (--reader-token-file) or a certificate of --reader-client-ca-file")
		default:
			refuse(w, http.StatusUnauthorized, "unauthenticated: reading needs a reader token (Authorization: Bearer, --reader-token-file) or a client certificate of --reader-client-ca-file")
		}
	})
}

func refuse(w http.ResponseWriter, code int, msg string) {
	if code == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="peertrail"`)
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	fmt.Fprintln(w, msg)
}

// LoadCAs reads the PEM certificates of a CA bundle file.
func LoadCAs(path string) ([]*x509.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read CA bundle: %w", err)
	}
	var out []*x509.Certificate
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("CA bundle %s: %w", path, err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("CA bundle %s holds no PEM certificate", path)
	}
	return out, nil
}

// ReadTokenFile reads bearer tokens from path: a file with one token a line (empty lines and
// lines starting with # are skipped), or a directory, such as a mounted Kubernetes Secret, whose
// every file holds tokens that way (names starting with "." are skipped: a Secret volume's
// ..data links). It fails when it finds no token.
func ReadTokenFile(path string) ([]string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	files := []string{path}
	if st.IsDir() {
		entries, err := os.ReadDir(path)
		if err != nil {
			return nil, fmt.Errorf("token directory: %w", err)
		}
		files = files[:0]
		for _, e := range entries {
			p := filepath.Join(path, e.Name())
			if strings.HasPrefix(e.Name(), ".") {
				continue
			}
			// A Secret's keys are symbolic links into ..data: follow them.
			if fst, err := os.Stat(p); err != nil || !fst.Mode().IsRegular() {
				continue
			}
			files = append(files, p)
		}
	}
	var out []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("token file: %w", err)
		}
		for line := range strings.Lines(string(b)) {
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			out = append(out, line)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("token file " + path + " holds no token")
	}
	return out, nil
}
