package sqlhttp_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/peertrail/peertrail/store/chdb"
	"github.com/peertrail/peertrail/store/sqlhttp"
)

// The allowlist is reviewed against the engine itself, on every axis a read has: each of the
// engine's functions, table functions, settings, output formats and system tables is either on
// a reviewed list or refused, and a later engine that adds one fails here until someone
// reviews it.

func lines(t *testing.T, q string) []string {
	t.Helper()
	out, err := engine(t).Engine().Query(context.Background(), q, "TabSeparatedRaw")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
}

func policy(t *testing.T) *sqlhttp.Policy {
	t.Helper()
	sess, err := engine(t).Engine().OpenSession(context.Background(), chdb.SessionOptions{Settings: [][2]string{{"readonly", "1"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	p, err := sqlhttp.LoadPolicy(context.Background(), sess)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestEveryEngineFunctionIsReviewed(t *testing.T) {
	allowed, listed, err := sqlhttp.ReviewedFunctions()
	if err != nil {
		t.Fatal(err)
	}
	p := policy(t)
	engineFns := map[string]bool{}
	for _, row := range lines(t, "SELECT name, alias_to FROM system.functions") {
		name, alias, _ := strings.Cut(row, "\t")
		if alias != "" {
			// An alias is judged as its function.
			if (p.Function(name) == nil) != allowed[alias] {
				t.Errorf("the alias %s of %s: allowed %v, its function %v", name, alias, p.Function(name) == nil, allowed[alias])
			}
			continue
		}
		engineFns[name] = true
		if !listed[name] {
			t.Errorf("the engine's function %s is not reviewed: read what it does, then list it in functions.txt as +%[1]s or -%[1]s", name)
		}
		if (p.Function(name) == nil) != allowed[name] {
			t.Errorf("%s: the policy says %v, functions.txt %v", name, p.Function(name), allowed[name])
		}
	}
	for name := range listed {
		if !engineFns[name] {
			t.Errorf("functions.txt lists %s, which the engine does not have", name)
		}
	}
	if len(allowed) < 500 {
		t.Errorf("only %d functions allowed", len(allowed))
	}
	// A combinator takes its base function's verdict.
	for name, want := range map[string]bool{"sumIf": true, "uniqExactState": true, "quantilesMerge": true, "countOrNull": true,
		"flameGraphIf": false, "fileIf": false, "aggThrowState": false} {
		if got := p.Function(name) == nil; got != want {
			t.Errorf("%s: allowed %v, want %v", name, got, want)
		}
	}
	// Table functions are refused wherever they appear; the one that shares its name with an
	// allowed function is format, whose scalar form only formats a string.
	var shared []string
	for _, name := range lines(t, "SELECT name FROM system.table_functions ORDER BY name") {
		if allowed[name] {
			shared = append(shared, name)
		}
		_, err := read(t, sqlhttp.ReadQuery{Text: "SELECT * FROM " + name + "()"})
		if errors.Is(err, sqlhttp.ErrUnparsable) { // the view functions want a query
			args := "SELECT 1"
			if name == "viewIfPermitted" {
				args += " ELSE null('x UInt8')"
			}
			_, err = read(t, sqlhttp.ReadQuery{Text: "SELECT * FROM " + name + "(" + args + ")"})
		}
		if !errors.Is(err, sqlhttp.ErrNotAllowed) {
			t.Errorf("the table function %s: got %v, want ErrNotAllowed", name, err)
		}
	}
	if !slices.Equal(shared, []string{"format"}) {
		t.Errorf("allowed functions that are also table functions: %v, want [format]: review the new one", shared)
	}
}

func TestEveryEngineSettingIsReviewed(t *testing.T) {
	h, err := sqlhttp.NewHandler(context.Background(), engine(t), sqlhttp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	names := lines(t, "SELECT name FROM system.settings ORDER BY name")
	if len(names) < 1000 {
		t.Fatalf("the engine lists %d settings", len(names))
	}
	allowed := sqlhttp.ClientSettings()
	for _, a := range allowed {
		if !slices.Contains(names, a) {
			t.Errorf("the allowed setting %s is not the engine's", a)
		}
	}
	// Protocol parameters the handler acts on itself (compression) or ignores (readonly: reads
	// are read-only whatever it says); none reaches the engine.
	protocol := []string{"enable_http_compression", "http_native_compression_disable_checksumming_on_decompress",
		"network_compression_method", "network_zstd_compression_level", "readonly"}
	for _, name := range names {
		if slices.Contains(allowed, name) || slices.Contains(protocol, name) {
			continue
		}
		for _, v := range []string{"1", "0"} {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/?"+url.Values{"query": {"SELECT 1"}, name: {v}}.Encode(), nil))
			if w.Code != http.StatusForbidden {
				t.Errorf("the setting %s=%s: %d %q, want 403", name, v, w.Code, w.Body.String())
			}
		}
	}
}

func TestEveryEngineFormatIsReviewed(t *testing.T) {
	allowed := sqlhttp.AllowedFormats()
	outputs := lines(t, "SELECT name FROM system.formats WHERE is_output ORDER BY name")
	for _, f := range allowed {
		if !slices.Contains(outputs, f) {
			t.Errorf("the allowed format %s is not one of the engine's", f)
		}
	}
	for _, f := range outputs {
		if slices.Contains(allowed, f) {
			continue
		}
		for _, q := range []sqlhttp.ReadQuery{{Text: "SELECT 1", Format: f}, {Text: "SELECT 1 FORMAT " + f}, {Text: "SELECT 1 FORMAT " + strings.ToLower(f)}} {
			if _, err := read(t, q); !errors.Is(err, sqlhttp.ErrNotAllowed) {
				t.Errorf("the format %s (%+v): got %v, want ErrNotAllowed", f, q, err)
			}
		}
	}
}

func TestEverySystemTableIsReviewed(t *testing.T) {
	for _, db := range lines(t, "SELECT name FROM system.databases WHERE name != 'peertrail' ORDER BY name") {
		for _, table := range lines(t, "SELECT name FROM system.tables WHERE database = '"+db+"' ORDER BY name") {
			if table == "" {
				continue
			}
			name := db + "." + table
			_, err := read(t, sqlhttp.ReadQuery{Text: "SELECT count() FROM " + name})
			if slices.Contains(sqlhttp.AllowedTables, name) {
				if err != nil {
					t.Errorf("the allowed table %s: %v", name, err)
				}
				continue
			}
			if !errors.Is(err, sqlhttp.ErrNotAllowed) {
				t.Errorf("the table %s: got %v, want ErrNotAllowed", name, err)
			}
		}
	}
}
