package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"slices"
	"strings"
	"testing"
)

// The shipped binary links no test code: not package testing, nothing under test/, and no
// test-helper package (httptest, storetest, ...). The real-apiserver demo runs its cluster
// from internal/kubecluster, which the e2e tests use through test/e2e/harness.
func TestBinaryLinksNoTestPackage(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 50 {
		t.Fatalf("go list -deps listed %d packages: %q", len(deps), out)
	}
	for _, p := range deps {
		if testSupport(p) {
			t.Errorf("peertrail links %s", p)
		}
	}
}

// testSupport reports whether package p is test code: package testing, anything under test/,
// or a test helper, whose name ends in "test" (httptest, fstest, storetest; the standard
// library's own internal packages, such as internal/synctest, and words like "latest" are not).
func testSupport(p string) bool {
	helper := strings.HasSuffix(path.Base(p), "test") && path.Base(p) != "latest" && !strings.HasPrefix(p, "internal/")
	return p == "testing" || strings.HasPrefix(p, "testing/") || strings.HasPrefix(p, module+"/test/") || helper
}

const module = "github.com/peertrail/peertrail"

// room is a part of the house: the packages whose import path (under the module) is path or
// below it, unless a longer room's path claims them.
type room struct {
	path string
	// may are the rooms its packages may import (within a room, anything); rule names the
	// rule those imports keep.
	may  []string
	rule string
}

// rooms are the house's rooms and which may import which: the code below holds every
// package's non-test imports to them, and ARCHITECTURE.md shows them (renderRules).
var rooms = []room{
	{"chain", nil, "the leaf imports nothing of ours"},
	{"metrics", nil, "metrics is names only"},
	{"internal", []string{"metrics"}, "a helper knows no stage"},
	{"ingest", []string{"internal", "metrics"}, "ingest knows no later stage"},
	{"correlate", []string{"chain", "ingest", "internal", "metrics"}, "correlate reaches the store only through its sink"},
	{"store", []string{"chain", "ingest", "internal", "metrics", "store/queries"}, "the store and the correlator are two consumers of the spool, side by side"},
	{"store/queries", nil, "a named query is text"},
	{"chainapi", []string{"chain"}, "the chain API reads memory and the store only through what it is given"},
	{"gate", []string{"chain", "metrics"}, "the gate reads the correlator's window, not the correlator"},
	{"config", []string{"chain", "ingest", "internal", "metrics"}, "config runs no stage"},
	{"server", []string{"chain", "chainapi", "config", "correlate", "gate", "ingest", "internal", "metrics", "store", "store/queries"}, "server assembles the stages"},
	{"simulate", []string{"internal"}, "load knows only the webhook"},
	{"loadgen", []string{"internal", "simulate"}, "load knows only the webhook"},
	{"bench", []string{"chain", "config", "ingest", "internal", "loadgen", "metrics", "server", "simulate", "store"}, "bench measures the process as server assembles it"},
	{"alerts", []string{"chain", "metrics"}, "views read through named queries"},
	{"dashboards", []string{"alerts", "chain", "metrics", "store/queries"}, "views read through named queries"},
	{"deploy", []string{"metrics"}, "views read through named queries"},
	{"cmd/peertrail", []string{"alerts", "bench", "chain", "config", "dashboards", "deploy", "gate", "internal", "loadgen", "metrics", "server", "simulate", "store", "store/queries"}, "the commands reach the correlator only through server"},
	{"cmd/demoserve", []string{"correlate", "ingest", "store", "test"}, "a tool, not shipped, may use test support"},
	{"test", nil, "tests may import anything"},
}

// The rules that hold across rooms.
const (
	ruleEveryPackage = "every package has a room"
	ruleNoCycles     = "no cycles between rooms"
	ruleNoTestCode   = "nothing of test support inside a product room"
)

// productRoom reports whether a room's code ships or runs in production: all but the tests
// and the documentation tool.
func productRoom(r string) bool { return r != "test" && r != "cmd/demoserve" }

// roomOf returns the room of import path p (under the module), "" when none claims it.
func roomOf(p string) string {
	p = strings.TrimPrefix(p, module+"/")
	best := ""
	for _, r := range rooms {
		if (p == r.path || strings.HasPrefix(p, r.path+"/")) && len(r.path) > len(best) {
			best = r.path
		}
	}
	return best
}

type listedPackage struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

// listPackages lists every package of the module with its non-test imports and dependencies.
func listPackages(t *testing.T) []listedPackage {
	t.Helper()
	out, err := exec.Command("go", "list", "-json=ImportPath,Imports,Deps", module+"/...").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	var pkgs []listedPackage
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p listedPackage
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 30 {
		t.Fatalf("go list listed %d packages", len(pkgs))
	}
	return pkgs
}

// TestHouseRules holds every package's imports to the house's rules (rooms and ruleNoCycles,
// ruleNoTestCode, ruleEveryPackage): a change that breaks one fails the subtest named for it.
func TestHouseRules(t *testing.T) {
	pkgs := listPackages(t)
	byRoom := map[string]room{}
	for _, r := range rooms {
		byRoom[r.path] = r
	}
	// violations are by rule, each "package imports package".
	violations := map[string][]string{}
	edges := map[string]map[string]bool{} // room -> rooms it imports
	for _, p := range pkgs {
		from := roomOf(p.ImportPath)
		if from == "" {
			violations[ruleEveryPackage] = append(violations[ruleEveryPackage], p.ImportPath+" is in no room")
			continue
		}
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, module+"/") && imp != module {
				continue
			}
			to := roomOf(imp)
			if to == from || to == "" {
				continue
			}
			if edges[from] == nil {
				edges[from] = map[string]bool{}
			}
			edges[from][to] = true
			if r := byRoom[from]; from != "test" && !slices.Contains(r.may, to) {
				violations[r.rule] = append(violations[r.rule], fmt.Sprintf("%s imports %s (room %s may import %v)", p.ImportPath, imp, from, r.may))
			}
		}
		if productRoom(from) {
			for _, d := range p.Deps {
				if testSupport(d) {
					violations[ruleNoTestCode] = append(violations[ruleNoTestCode], fmt.Sprintf("%s depends on %s", p.ImportPath, d))
				}
			}
		}
	}
	if c := cycle(edges); c != nil {
		violations[ruleNoCycles] = append(violations[ruleNoCycles], "the code: "+strings.Join(c, " -> "))
	}
	allowed := map[string]map[string]bool{}
	for _, r := range rooms {
		allowed[r.path] = map[string]bool{}
		for _, m := range r.may {
			if _, ok := byRoom[m]; !ok {
				t.Errorf("room %s may import %s, which is no room", r.path, m)
			}
			allowed[r.path][m] = true
		}
	}
	if c := cycle(allowed); c != nil {
		violations[ruleNoCycles] = append(violations[ruleNoCycles], "the rules themselves: "+strings.Join(c, " -> "))
	}
	for _, rule := range ruleNames() {
		t.Run(rule, func(t *testing.T) {
			for _, v := range violations[rule] {
				t.Error(v)
			}
		})
	}
}

// ruleNames are the rules, each once, in the order ARCHITECTURE.md shows them.
func ruleNames() []string {
	var out []string
	for _, r := range rooms {
		if !slices.Contains(out, r.rule) {
			out = append(out, r.rule)
		}
	}
	return append(out, ruleNoCycles, ruleNoTestCode, ruleEveryPackage)
}

// cycle returns a cycle of the graph (its first node repeated at the end), nil when there is
// none.
func cycle(g map[string]map[string]bool) []string {
	const (
		unseen = iota
		onPath
		done
	)
	state := map[string]int{}
	var path []string
	var visit func(n string) []string
	visit = func(n string) []string {
		state[n] = onPath
		path = append(path, n)
		next := make([]string, 0, len(g[n]))
		for m := range g[n] {
			next = append(next, m)
		}
		slices.Sort(next)
		for _, m := range next {
			switch state[m] {
			case onPath:
				i := slices.Index(path, m)
				return append(slices.Clone(path[i:]), m)
			case unseen:
				if c := visit(m); c != nil {
					return c
				}
			}
		}
		path = path[:len(path)-1]
		state[n] = done
		return nil
	}
	nodes := make([]string, 0, len(g))
	for n := range g {
		nodes = append(nodes, n)
	}
	slices.Sort(nodes)
	for _, n := range nodes {
		if state[n] == unseen {
			if c := visit(n); c != nil {
				return c
			}
		}
	}
	return nil
}

// renderRules is the house's rules as ARCHITECTURE.md shows them.
func renderRules() string {
	var b strings.Builder
	b.WriteString("| room | may import (of ours) | rule |\n|---|---|---|\n")
	for _, r := range rooms {
		may := "nothing"
		if r.path == "test" {
			may = "anything"
		} else if len(r.may) > 0 {
			may = "`" + strings.Join(r.may, "`, `") + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", r.path, may, r.rule)
	}
	fmt.Fprintf(&b, "\nAnd across rooms: %s; %s (package testing, anything under `test/`, a helper named `*test`: "+
		"only `test/` and `cmd/demoserve` may use them); %s (a new package joins a room, or the table gets one).\n",
		ruleNoCycles, ruleNoTestCode, ruleEveryPackage)
	return b.String()
}

// TestArchitectureShowsTheHouseRules: ARCHITECTURE.md's table of the rules is renderRules', so
// the page and the test say the same.
func TestArchitectureShowsTheHouseRules(t *testing.T) {
	const begin, end = "<!-- rules: cmd/peertrail/deps_test.go renders them -->\n", "<!-- end of the rules -->"
	b, err := os.ReadFile("../../ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	if i < 0 || j < i {
		t.Fatalf("ARCHITECTURE.md has no rules between %q and %q", begin, end)
	}
	if got, want := doc[i+len(begin):j], renderRules(); got != want {
		t.Errorf("ARCHITECTURE.md's rules are not the test's; between the markers, put:\n%s", want)
	}
}
