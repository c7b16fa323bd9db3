package attack

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/peertrail/peertrail/server"
)

// What an ordinary user puts in the audit and so in front of the operator (issue 39, item 4):
// ESC sequences in a name (a path segment the apiserver percent-decodes into objectRef.name),
// the single-character CSI U+009B and bidi controls in the user agent and the Audit-ID, a
// bell and a carriage return in a status message.
var (
	hostileID      = "\u202eevil-\u009b6n-" + "1"
	hostileName    = "cm\x1b]0;pwned\x07\x1b[2J"
	hostileURI     = "/api/v1/namespaces/default/configmaps/cm%1B]0;pwned%07%1B[2J"
	hostileAgent   = "kubectl/v1.36.3 \u009b31m\u202etxt.exe\u2066 \u061c\u200e\u200f\u202a\u202b\u202c\u202d\u2067\u2068\u2069"
	hostileMessage = "configmaps \"cm\" not found\r\x1b[1A\x1b[2Kall good\x07"
)

// TestTerminalEscapesNeverReachTheOperator stores those events in a real `peertrail serve` and
// runs the real `peertrail sql` and `peertrail report` binaries against it, as an operator
// would: table, tsv and csv print none of the controls raw (they show as escapes), and json
// gives every value back exactly.
func TestTerminalEscapesNeverReachTheOperator(t *testing.T) {
	st := startSQLTarget(t)
	bin, err := sqlBinary()
	if err != nil {
		t.Fatal(err)
	}
	str := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	ev := func(stage, ts string) string {
		return `{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":` + str(hostileID) + `,"stage":"` + stage + `",` +
			`"requestURI":` + str(hostileURI) + `,"verb":"get","user":{"username":"alice","groups":["dev"]},` +
			`"sourceIPs":["10.1.2.3"],"userAgent":` + str(hostileAgent) + `,` +
			`"objectRef":{"resource":"configmaps","namespace":"default","name":` + str(hostileName) + `,"apiVersion":"v1"},` +
			`"responseStatus":{"metadata":{},"status":"Failure","reason":"NotFound","code":404,"message":` + str(hostileMessage) + `},` +
			`"requestReceivedTimestamp":"` + ts + `","stageTimestamp":"` + ts + `"}`
	}
	st.post(t, "kas-a", eventList(ev("ResponseComplete", now(0))))
	st.waitCount(t, "SELECT count() FROM peertrail.events WHERE apiserver = 'kas-a'", 1)
	st.waitCount(t, "SELECT count() FROM peertrail.chains FINAL WHERE state = 'final'", 1)

	run := func(args ...string) string {
		t.Helper()
		args = append(args[:1:1], append([]string{"--sql-server", st.sqlURL,
			"--clickhouse-password-file", filepath.Join(st.dataDir, server.SQLPasswordFileName)}, args[1:]...)...)
		cmd := exec.Command(bin, args...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("peertrail %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
		if bad := rawControl(stderr.String()); bad != "" {
			t.Errorf("peertrail %s wrote %s to stderr:\n%q", args[0], bad, stderr.String())
		}
		return string(out)
	}
	safe := func(what, out string, want ...string) {
		t.Helper()
		if bad := rawControl(out); bad != "" {
			t.Errorf("%s printed %s:\n%q", what, bad, out)
		}
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("%s lacks %q (the value, escaped):\n%s", what, w, out)
			}
		}
	}
	escaped := []string{`\u202eevil-\u009b6n-1`, `cm\x1b]0;pwned\x07\x1b[2J`, `\u009b31m\u202etxt.exe\u2066`, `\r\x1b[1A\x1b[2Kall good\x07`}
	events := "SELECT audit_id, name, request_uri, user_agent, message FROM peertrail.events WHERE apiserver = 'kas-a'"
	for _, format := range []string{"table", "tsv", "csv"} {
		safe("sql -o "+format, run("sql", "-o", format, events), escaped...)
		safe("sql -o "+format+" of chains", run("sql", "-o", format, "SELECT * FROM peertrail.chains FINAL"), `\u202eevil-\u009b6n-1`, `cm\x1b]0;pwned\x07\x1b[2J`)
		safe("report --query audit_id_records -o "+format,
			run("report", "--query", "audit_id_records", "--param", "audit_id="+hostileID, "-o", format), `\u009b31m\u202etxt.exe\u2066`)
	}
	safe("report", run("report", "--since", "1h"))
	safe("report -o tsv", run("report", "--since", "1h", "-o", "tsv"))

	// json stays exact: every value comes back as it was stored.
	sc := bufio.NewScanner(strings.NewReader(run("sql", "-o", "json", events)))
	rows := 0
	for sc.Scan() {
		var row map[string]any
		if err := json.Unmarshal(sc.Bytes(), &row); err != nil {
			t.Fatal(err)
		}
		rows++
		for col, want := range map[string]string{"audit_id": hostileID, "name": hostileName, "request_uri": hostileURI, "user_agent": hostileAgent, "message": hostileMessage} {
			if row[col] != want {
				t.Errorf("json %s = %q, want %q exactly", col, row[col], want)
			}
		}
	}
	if rows != 1 {
		t.Errorf("json printed %d rows, want 1", rows)
	}
}

// rawControl names the first thing in out a terminal would act on: a C0 control other than
// the tab and newline that separate fields and rows, DEL, a C1 control, a bidi control, or a
// byte that is not UTF-8. "" when there is none.
func rawControl(out string) string {
	for i, r := range out {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(out[i:], "\ufffd"):
			return fmt.Sprintf("a byte that is not UTF-8 at %d", i)
		case r == '\t' || r == '\n':
		case r < 0x20 || (r >= 0x7f && r <= 0x9f), r == 0x061c, r == 0x200e, r == 0x200f,
			r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
			return fmt.Sprintf("U+%04X at byte %d", r, i)
		}
	}
	return ""
}
