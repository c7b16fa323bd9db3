package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// closedPort returns an address on loopback where nothing listens.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestCLIErrors runs each command wrongly: without its arguments, with bad ones, against a
// server that is not there, against the wrong port. Each must end with its documented exit
// status and one line on stderr, "peertrail: <what> (<hint>)", and print nothing on stdout.
func TestCLIErrors(t *testing.T) {
	down := "http://" + closedPort(t)
	// What answers on serve's SQL port (--sql-listen): a ClickHouse HTTP interface.
	sqlPort := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ping" {
			io.WriteString(w, "Ok.\n")
			return
		}
		w.Header().Set("X-ClickHouse-Exception-Code", "1000")
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, "Code: 1000. DB::Exception: There is no handle "+r.URL.Path+". (UNKNOWN_HANDLER)\n")
	}))
	defer sqlPort.Close()
	// What answers on serve's API port (--listen): probes open, the rest for readers.
	apiPort := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/healthz":
			io.WriteString(w, "ok\n")
		case r.Header.Get("Authorization") == "":
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"error":"a reader's credential is required"}`)
		case strings.HasPrefix(r.URL.Path, "/api/v1/chains/"):
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"error":"no chain with auditID \"nope\""}`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer apiPort.Close()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	tok := "PEERTRAIL_TOKEN=x"

	cases := []struct {
		name  string
		args  []string
		env   string
		code  int
		wants []string // in the one line
	}{
		// No or bad arguments: 2, with the usage.
		{"chain without its argument", []string{"chain"}, "", exitUsage, []string{"needs AUDIT_ID", "usage: peertrail chain AUDIT_ID"}},
		{"chain with two", []string{"chain", "a", "b"}, "", exitUsage, []string{`unexpected "b"`, "usage:"}},
		{"gate with an argument", []string{"gate", "now"}, "", exitUsage, []string{"takes no arguments", "usage: peertrail gate"}},
		{"an output format nobody knows", []string{"gate", "-o", "xml"}, "", exitUsage, []string{`-o "xml"`, "table, json or yaml"}},
		{"sql with two arguments", []string{"sql", "SELECT", "1"}, "", exitUsage, []string{"quote the query", "usage: peertrail sql"}},
		{"sql with an empty query", []string{"sql", " "}, "", exitUsage, []string{"no query"}},
		{"sql with a bad -o", []string{"sql", "-o", "xml", "SELECT 1"}, "", exitUsage, []string{`-o "xml"`}},
		{"report backwards", []string{"report", "--since", "1m", "--until", "2m"}, "", exitUsage, []string{"--since must reach further back"}},
		{"report of an unknown query", []string{"report", "--query", "nope", "--sql-server", down}, "", exitUsage, []string{"nope"}},
		{"an unknown command", []string{"chian"}, "", exitUsage, []string{`unknown command "chian"`, "peertrail --help"}},
		{"an unknown flag", []string{"chain", "--sever", "x", "id"}, "", exitUsage, []string{"unknown flag: --sever", "usage:"}},
		{"version with an argument", []string{"version", "x"}, "", exitUsage, []string{"takes no arguments"}},
		{"schema with an argument", []string{"schema", "x"}, "", exitUsage, []string{"takes no arguments"}},
		{"serve without TLS", []string{"serve"}, "", exitUsage, []string{"--tls-cert-file and --tls-key-file", "--insecure-http"}},
		{"serve plain HTTP off loopback", []string{"serve", "--insecure-http", "--listen", "0.0.0.0:0"}, "", exitUsage, []string{"loopback only", "--listen 0.0.0.0:0"}},
		{"serve with a missing token file", []string{"serve", "--insecure-http", "--listen", "127.0.0.1:0", "--reader-token-file", "/nonexistent/readers"}, "", exitUsage, []string{"--reader-token-file"}},
		{"serve on a busy port", []string{"serve", "--insecure-http", "--listen", busy.Addr().String(), "--store", "none"}, "", exitFailure, []string{"address already in use", "give --listen another address", "127.0.0.1:0"}},
		// Nothing there: 5.
		{"chain, server down", []string{"chain", "x", "--server", down}, tok, exitUnreachable, []string{"nothing answers at " + down, "--server"}},
		{"gate, server down", []string{"gate", "--server", down}, tok, exitUnreachable, []string{"connection refused", "--server"}},
		{"sql, server down", []string{"sql", "--sql-server", down, "SELECT 1"}, "", exitUnreachable, []string{"nothing answers at " + down, "--sql-server"}},
		{"report, server down", []string{"report", "--sql-server", down}, "", exitUnreachable, []string{"connection refused"}},
		{"chain, https to plain HTTP", []string{"chain", "x", "--server", strings.Replace(apiPort.URL, "http:", "https:", 1)}, tok, exitUnreachable, []string{"plain HTTP", "http://"}},
		// The wrong port: 5, and which address is right.
		{"chain at the SQL port", []string{"chain", "x", "--server", sqlPort.URL}, tok, exitUnreachable, []string{"SQL interface", "--listen"}},
		{"gate at the SQL port", []string{"gate", "--server", sqlPort.URL}, tok, exitUnreachable, []string{"SQL interface", "--listen"}},
		{"sql at the API port", []string{"sql", "--sql-server", apiPort.URL, "SELECT 1"}, "", exitUnreachable, []string{"API", "--sql-listen"}},
		{"report at the API port", []string{"report", "--server", apiPort.URL}, "", exitUnreachable, []string{"API", "--sql-listen"}},
		// Refused and not found.
		{"chain without a token", []string{"chain", "x", "--server", apiPort.URL}, "PEERTRAIL_TOKEN=", exitRefused, []string{"401", "--token-file"}},
		{"chain of an unknown auditID", []string{"chain", "nope", "--server", apiPort.URL}, tok, exitNotFound, []string{`no chain with auditID "nope"`}},
		// The other commands: apiservers asks the API, simulate and loadgen post to the
		// receiver (checked before the run, not after --duration of posting into nothing).
		{"apiservers with an argument", []string{"apiservers", "x"}, "", exitUsage, []string{"takes no arguments", "usage: peertrail apiservers"}},
		{"apiservers at no time", []string{"apiservers", "--at", "yesterday", "--server", down}, tok, exitUsage, []string{`--at "yesterday"`, "RFC 3339"}},
		{"apiservers, server down", []string{"apiservers", "--server", down}, tok, exitUnreachable, []string{"nothing answers at " + down, "--server"}},
		{"apiservers at the SQL port", []string{"apiservers", "--server", sqlPort.URL}, tok, exitUnreachable, []string{"SQL interface", "--listen"}},
		{"simulate with an argument", []string{"simulate", "x"}, "", exitUsage, []string{"takes no arguments", "usage: peertrail simulate"}},
		{"simulate one apiserver", []string{"simulate", "--apiservers", "1", "--url", down}, "", exitUsage, []string{"--apiservers must be at least 2", "usage:"}},
		{"simulate to no URL", []string{"simulate", "--url", "127.0.0.1:8443"}, "", exitUsage, []string{"not an http:// or https:// URL", "--url takes"}},
		{"simulate, receiver down", []string{"simulate", "--url", down}, "", exitUnreachable, []string{"nothing answers at " + down, "--url"}},
		{"simulate to the SQL port", []string{"simulate", "--url", sqlPort.URL}, "", exitUnreachable, []string{"SQL interface", "--listen"}},
		{"loadgen with an argument", []string{"loadgen", "x"}, "", exitUsage, []string{"takes no arguments", "usage: peertrail loadgen"}},
		{"loadgen at no rate", []string{"loadgen", "--rate", "0"}, "", exitUsage, []string{"must be positive", "usage:"}},
		{"loadgen, receiver down", []string{"loadgen", "--url", down}, "", exitUnreachable, []string{"nothing answers at " + down, "--url"}},
		{"loadgen -o yaml, receiver down", []string{"loadgen", "-o", "yaml", "--url", down}, "", exitUnreachable, []string{"nothing answers at " + down}},
		{"loadgen -o xml", []string{"loadgen", "-o", "xml"}, "", exitUsage, []string{`-o "xml"`, "table, json or yaml"}},
		{"bench -o xml", []string{"bench", "-o", "xml"}, "", exitUsage, []string{`-o "xml"`, "table, json or yaml"}},
		{"loadgen to the SQL port", []string{"loadgen", "--url", sqlPort.URL}, "", exitUnreachable, []string{"SQL interface", "--listen"}},
		{"bench with an argument", []string{"bench", "x"}, "", exitUsage, []string{"takes no arguments"}},
		{"demo on no address", []string{"demo", "--listen", "8443"}, "", exitUsage, []string{`--listen "8443"`, "127.0.0.1:0"}},
		{"demo off loopback", []string{"demo", "--sql-listen", "0.0.0.0:0"}, "", exitUsage, []string{"--sql-listen 0.0.0.0:0 is not loopback"}},
		{"demo with an argument", []string{"demo", "x"}, "", exitUsage, []string{"takes no arguments"}},
		{"deploy of an unknown file", []string{"deploy", "kubeconfig"}, "", exitUsage, []string{`unknown command "kubeconfig"`, "peertrail deploy --help"}},
		{"deploy webhook-config without its flags", []string{"deploy", "webhook-config"}, "", exitUsage, []string{`"apiserver"`, "usage: peertrail deploy webhook-config"}},
		{"generate something unknown", []string{"generate", "grafana"}, "", exitUsage, []string{`unknown command "grafana"`, "peertrail generate --help"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.env != "" {
				k, v, _ := strings.Cut(c.env, "=")
				t.Setenv(k, v)
			}
			var out, errOut bytes.Buffer
			code := run(context.Background(), c.args, strings.NewReader(""), &out, &errOut)
			msg := errOut.String()
			if code != c.code {
				t.Errorf("peertrail %s: exit %d, want %d; stderr: %s", strings.Join(c.args, " "), code, c.code, msg)
			}
			if strings.Count(msg, "\n") != 1 || !strings.HasPrefix(msg, "peertrail: ") {
				t.Errorf("peertrail %s: want one line \"peertrail: ...\" on stderr, got %q", strings.Join(c.args, " "), msg)
			}
			for _, w := range c.wants {
				if !strings.Contains(msg, w) {
					t.Errorf("peertrail %s: stderr %q lacks %q", strings.Join(c.args, " "), msg, w)
				}
			}
			if out.Len() > 0 {
				t.Errorf("peertrail %s: printed on stdout: %q", strings.Join(c.args, " "), out.String())
			}
		})
	}
}

// generate must not create dashboards/generated in whatever directory it runs in.
func TestGenerateOutsideTheRepository(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"generate", "dashboards"}, strings.NewReader(""), &out, &errOut)
	if code != exitUsage || !strings.Contains(errOut.String(), "not the peertrail repository's root") {
		t.Fatalf("exit %d, stderr %q", code, errOut.String())
	}
	if _, err := readDirNames(dir); err != nil || len(mustNames(t, dir)) > 0 {
		t.Fatalf("generate wrote into %s: %v", dir, mustNames(t, dir))
	}
	code = run(context.Background(), []string{"generate", "dashboards", "--out", dir + "/d"}, strings.NewReader(""), &out, &errOut)
	if code != exitOK {
		t.Fatalf("with --out: exit %d, stderr %q", code, errOut.String())
	}
}

func TestVersionOutputs(t *testing.T) {
	for _, o := range []string{"table", "json", "yaml"} {
		var out, errOut bytes.Buffer
		if code := run(context.Background(), []string{"version", "-o", o}, strings.NewReader(""), &out, &errOut); code != 0 {
			t.Fatalf("-o %s: exit %d: %s", o, code, errOut.String())
		}
		if !strings.Contains(out.String(), "version") || !strings.Contains(out.String(), "go1.") {
			t.Errorf("-o %s: %q", o, out.String())
		}
	}
}

func readDirNames(dir string) ([]string, error) {
	es, err := os.ReadDir(dir)
	names := make([]string, len(es))
	for i, e := range es {
		names[i] = e.Name()
	}
	return names, err
}

func mustNames(t *testing.T, dir string) []string {
	n, err := readDirNames(dir)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// sql waiting for its query on standard input ends on Ctrl-C (the command's context is
// cancelled), with exit status 130, instead of waiting on.
func TestSQLStdinInterrupted(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close() // never written: standard input stays open
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // Ctrl-C
	var out, errOut bytes.Buffer
	code := run(ctx, []string{"sql"}, r, &out, &errOut)
	if code != exitInterrupted || errOut.String() != "peertrail: interrupted\n" {
		t.Fatalf("exit %d, stderr %q", code, errOut.String())
	}
}

// serve checks its command line before it creates anything: a refused one leaves no data
// directory behind.
func TestServeRefusesBeforeSideEffects(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, args := range [][]string{
		{"serve"}, // no TLS
		{"serve", "--insecure-http", "--listen", "0.0.0.0:0"},
		{"serve", "--tls-cert-file", "/nonexistent/tls.crt", "--tls-key-file", "/nonexistent/tls.key"},
		{"serve", "--insecure-http", "--listen", "127.0.0.1:0", "--reader-token-file", "/nonexistent/readers"},
		{"serve", "--insecure-http", "--listen", busy.Addr().String()},
		{"serve", "--insecure-http", "--listen", "127.0.0.1:0", "--sql-listen", busy.Addr().String()},
		{"serve", "--insecure-http", "--listen", "127.0.0.1:0", "--chdb-lib", "/nonexistent/libchdb.so"},
	} {
		dataDir := filepath.Join(t.TempDir(), "data")
		var out, errOut bytes.Buffer
		code := run(context.Background(), append(args, "--data-dir", dataDir), strings.NewReader(""), &out, &errOut)
		if code == exitOK {
			t.Errorf("%v: accepted", args)
		}
		if _, err := os.Stat(dataDir); err == nil {
			t.Errorf("%v: refused (%s) after creating the data directory", args, strings.TrimSpace(errOut.String()))
		}
	}
}

// TestHelpTexts walks every command's flags: pflag shows a backquoted word of a flag's usage
// as its value type (sql --help once read "--server peertrail serve"), and the commands that
// only read must not list the store's DDL or migration flags.
func TestHelpTexts(t *testing.T) {
	readOnly := map[string]bool{"chain": true, "gate": true, "apiservers": true, "sql": true, "report": true, "version": true}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if name, _ := pflag.UnquoteUsage(f); strings.ContainsAny(name, " ,.") {
				t.Errorf("%s --%s: a backquoted phrase in its usage became its value type %q", c.CommandPath(), f.Name, name)
			}
			if f.Hidden {
				return
			}
			if readOnly[c.Name()] && (strings.Contains(f.Name, "cluster") || strings.Contains(f.Name, "migrat")) {
				t.Errorf("%s only reads, yet has --%s", c.CommandPath(), f.Name)
			}
		})
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(newRootCommand())
	for _, c := range []string{"sql", "report"} {
		var out, errOut bytes.Buffer
		if code := run(context.Background(), []string{c, "--help"}, strings.NewReader(""), &out, &errOut); code != exitOK {
			t.Fatalf("%s --help: exit %d: %s", c, code, errOut.String())
		}
		if !strings.Contains(out.String(), "--sql-server URL") {
			t.Errorf("%s --help lacks \"--sql-server URL\":\n%s", c, out.String())
		}
	}
}

// The demo on a busy port it was told to use says which flag changes it, before it starts
// anything.
func TestDemoOnABusyPortItWasGiven(t *testing.T) {
	requireEngine(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"demo", "--sql-listen", busy.Addr().String()}, strings.NewReader(""), &out, &errOut)
	msg := errOut.String()
	if code != exitFailure || strings.Count(msg, "\n") != 1 || !strings.Contains(msg, "--sql-listen "+busy.Addr().String()+": address already in use") ||
		!strings.Contains(msg, "give --sql-listen another address") {
		t.Fatalf("exit %d, stderr %q", code, msg)
	}
}
