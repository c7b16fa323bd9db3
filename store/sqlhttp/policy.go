package sqlhttp

import (
	"bufio"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/peertrail/peertrail/store/chdb"
)

// ErrNotAllowed: the statement names a function, table, format, setting or clause that is not
// on the SQL interface's allowlist (see Policy).
var ErrNotAllowed = errors.New("store: not allowed on peertrail's SQL interface")

// functionsReviewed is the reviewed list of the engine's functions (see its header).
//
//go:embed functions.txt
var functionsReviewed string

// parserFunctions are names the engine's parser writes into a statement's tree for syntax
// (a -> b, EXISTS (...), untuple(t).*, GROUPING(a)) that system.functions does not list.
var parserFunctions = map[string]bool{"lambda": true, "exists": true, "untuple": true, "grouping": true}

// AllowedTables are the tables outside the peertrail database a read may name: the schema
// browsers' (Grafana's ClickHouse data source lists databases, tables and columns, and
// suggests functions; `SHOW DATABASES` and `SHOW TABLES` read the first two) and system.one,
// the table a SELECT without FROM reads. Every table of the peertrail database is allowed.
var AllowedTables = []string{"system.columns", "system.databases", "system.functions", "system.one", "system.tables"}

// AllowedFormats returns the output formats a read may ask for (FORMAT or default_format),
// compared without case as the engine does: the text, JSON and binary row formats clients use,
// each of which this package can join from the engine's chunks (see result). Refused among
// others: Template and CustomSeparated (they read files named in settings), Protobuf and
// CapnProto (they write schema files), the columnar and wire formats, and the MonoBlock ones.
func AllowedFormats() []string {
	out := make([]string, 0, len(formatSpecs))
	for _, s := range formatSpecs {
		out = append(out, s.name)
	}
	sort.Strings(out)
	return out
}

// Policy is the allowlist an untrusted read is held to, checked against the statement's
// syntax tree as the engine's own parser builds it (EXPLAIN AST, before anything runs):
//   - the statement is a SELECT (with UNION, INTERSECT, EXCEPT, CTEs, subqueries), DESCRIBE,
//     EXPLAIN (plan, AST, syntax, pipeline, estimate) of one, SHOW DATABASES or SHOW TABLES;
//   - every function it calls is "+" in functions.txt (by the name the engine resolves an
//     alias or case-insensitive spelling to; an aggregate combinator as its base);
//   - no table function, anywhere;
//   - every table it names is in the peertrail database or in AllowedTables, and so is every
//     database-qualified name (the right side of IN names a table too);
//   - no SETTINGS clause and no INTO OUTFILE; the output format is in AllowedFormats.
//
// The tree's text prints identifiers as written, so a quoted identifier with a line break can
// add lines; every rule is therefore one that an extra line can only make stricter: each line
// is checked on its own, and where a rule looks at a line's place (the format, a table
// function) it takes every candidate.
//
// Concurrency: a Policy is read-only once built; Check may be called from any goroutine.
type Policy struct {
	byName   map[string]function // the engine's functions by exact name
	byFolded map[string]function // its case-insensitive ones by lower-case name
	allowed  map[string]bool     // the "+" names of functions.txt
	// combinators are the aggregate combinator suffixes, longest first.
	combinators []string
	databases   map[string]bool
	tables      map[string]bool
}

type function struct {
	canonical string // the function an alias names, or the name itself
	aggregate bool
}

// reviewedFunctions parses functions.txt: the allowed names, and every name it lists.
func reviewedFunctions() (allowed, listed map[string]bool, err error) {
	allowed, listed = map[string]bool{}, map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(functionsReviewed))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if len(line) < 2 || (line[0] != '+' && line[0] != '-') {
			return nil, nil, fmt.Errorf("functions.txt:%d: %q is neither +name nor -name", n, line)
		}
		name := line[1:]
		if listed[name] {
			return nil, nil, fmt.Errorf("functions.txt:%d: %s is listed twice", n, name)
		}
		listed[name] = true
		if line[0] == '+' {
			allowed[name] = true
		}
	}
	return allowed, listed, nil
}

// LoadPolicy builds the policy from the engine's own catalogue of functions, aggregate
// combinators and databases, read on sess.
func LoadPolicy(ctx context.Context, sess *chdb.Session) (*Policy, error) {
	allowed, _, err := reviewedFunctions()
	if err != nil {
		return nil, err
	}
	p := &Policy{byName: map[string]function{}, byFolded: map[string]function{}, allowed: allowed,
		databases: map[string]bool{}, tables: map[string]bool{}}
	rows, err := sessRows(ctx, sess, "SELECT name, is_aggregate, case_insensitive, alias_to FROM system.functions")
	if err != nil {
		return nil, err
	}
	for _, r := range rows {
		if len(r) != 4 {
			return nil, fmt.Errorf("store: system.functions row %q", r)
		}
		f := function{canonical: r[0], aggregate: r[1] == "1"}
		if r[3] != "" {
			f.canonical = r[3]
		}
		p.byName[r[0]] = f
		if r[2] == "1" {
			p.byFolded[strings.ToLower(r[0])] = f
		}
	}
	if len(p.byName) < 1000 {
		return nil, fmt.Errorf("store: the engine lists %d functions; it does not look like ClickHouse %s", len(p.byName), chdb.Version)
	}
	// An alias's own flags can differ from its function's: take the function's.
	for name, f := range p.byName {
		if t, ok := p.byName[f.canonical]; ok {
			f.aggregate = t.aggregate
			p.byName[name] = f
		}
	}
	rows, err = sessRows(ctx, sess, "SELECT name FROM system.aggregate_function_combinators")
	if err != nil {
		return nil, err
	}
	for _, r := range rows {
		p.combinators = append(p.combinators, r[0])
	}
	sort.Slice(p.combinators, func(i, j int) bool { return len(p.combinators[i]) > len(p.combinators[j]) })
	rows, err = sessRows(ctx, sess, "SELECT name FROM system.databases")
	if err != nil {
		return nil, err
	}
	for _, r := range rows {
		p.databases[r[0]] = true
	}
	p.databases[readDatabase] = true
	for _, t := range AllowedTables {
		p.tables[t] = true
	}
	return p, nil
}

func sessRows(ctx context.Context, sess *chdb.Session, q string) ([][]string, error) {
	res, err := sess.Exec(ctx, q, "TabSeparated", nil, nil, 0)
	if err != nil {
		return nil, fmt.Errorf("store: read the engine's catalogue: %w", err)
	}
	var rows [][]string
	for _, line := range strings.Split(strings.TrimSuffix(string(res.Data), "\n"), "\n") {
		if line != "" {
			rows = append(rows, strings.Split(line, "\t"))
		}
	}
	return rows, nil
}

// Function says whether a read may call the function name (as the parser wrote it).
func (p *Policy) Function(name string) error {
	if parserFunctions[name] {
		return nil
	}
	if f, ok := p.lookup(name); ok {
		if p.allowed[f.canonical] {
			return nil
		}
		return fmt.Errorf("%w: the function %s is not on its reviewed list", ErrNotAllowed, name)
	}
	for base := name; ; {
		cut := ""
		for _, c := range p.combinators {
			if len(base) > len(c) && strings.HasSuffix(base, c) {
				cut = c
				break
			}
		}
		if cut == "" {
			break
		}
		base = strings.TrimSuffix(base, cut)
		if f, ok := p.lookup(base); ok {
			if f.aggregate && p.allowed[f.canonical] {
				return nil
			}
			return fmt.Errorf("%w: the function %s is not on its reviewed list", ErrNotAllowed, name)
		}
	}
	return fmt.Errorf("%w: %s is not a function the engine lists (table functions are refused)", ErrNotAllowed, name)
}

func (p *Policy) lookup(name string) (function, bool) {
	if f, ok := p.byName[name]; ok {
		return f, true
	}
	f, ok := p.byFolded[strings.ToLower(name)]
	return f, ok
}

// Table says whether a read may name the table name (as the parser prints it: "db.table" or
// "table"). An unqualified name is the peertrail database's, or a CTE's.
func (p *Policy) Table(name string) error {
	db, table, ok := strings.Cut(name, ".")
	if !ok || db == readDatabase {
		return nil
	}
	if t, _, _ := strings.Cut(table, "."); p.tables[db+"."+t] {
		return nil
	}
	return fmt.Errorf("%w: the table %s (the peertrail database and %s are allowed)", ErrNotAllowed, name, strings.Join(AllowedTables, ", "))
}

// identifier checks a name in an expression: one qualified with a database is a table.
func (p *Policy) identifier(name string) error {
	if db, _, ok := strings.Cut(name, "."); ok && p.databases[db] {
		return p.Table(name)
	}
	return nil
}

// Format says whether a read may ask for the output format name.
func (p *Policy) Format(name string) error {
	_, err := formatOf(name)
	return err
}

func formatOf(name string) (formatSpec, error) {
	if s, ok := formatSpecs[strings.ToLower(name)]; ok {
		return s, nil
	}
	return formatSpec{}, fmt.Errorf("%w: the output format %s (allowed: %s)", ErrNotAllowed, name, strings.Join(AllowedFormats(), ", "))
}

// nodeTypes are the syntax tree's node types a read may have (EXPLAIN AST's names): those of
// SELECT and its clauses, reviewed one by one. Any other (a columns transformer that APPLYs a
// function by name, a query parameter left unset, syntax a later engine adds) is refused.
var nodeTypes = map[string]bool{
	"SelectWithUnionQuery": true, "SelectIntersectExceptQuery": true, "SelectQuery": true,
	"ExpressionList": true, "Function": true, "Identifier": true, "TableIdentifier": true,
	"Literal": true, "Asterisk": true, "QualifiedAsterisk": true,
	"ColumnsRegexpMatcher": true, "ColumnsListMatcher": true,
	"QualifiedColumnsRegexpMatcher": true, "QualifiedColumnsListMatcher": true,
	"ColumnsExceptTransformer": true,
	"TablesInSelectQuery":      true, "TablesInSelectQueryElement": true, "TableExpression": true,
	"TableJoin": true, "ArrayJoin": true, "Subquery": true, "OrderByElement": true,
	"WindowDefinition": true, "WindowListElement": true, "WithElement": true,
	"SampleRatio": true, "DescribeQuery": true,
}

// explainKinds are the EXPLAIN forms allowed, as the root line of the tree shows them.
var explainKinds = map[string]bool{
	"Explain EXPLAIN": true, "Explain EXPLAIN PLAN": true, "Explain EXPLAIN AST": true,
	"Explain EXPLAIN SYNTAX": true, "Explain EXPLAIN PIPELINE": true, "Explain EXPLAIN ESTIMATE": true,
}

// showStatement is the normalised text of the SHOW statements allowed (formatQuerySingleLine):
// both read only system.databases or system.tables, whose names the tree does not print.
var showStatement = regexp.MustCompile(`^SHOW (?:DATABASES|TABLES(?: FROM [A-Za-z_][A-Za-z0-9_]*)?)(?: (?:NOT )?I?LIKE '(?:[^'\\]|\\.)*')?(?: LIMIT [0-9]+)?(?: FORMAT ([A-Za-z0-9_]+))?$`)

// Statement is what Check learned of an allowed statement.
type Statement struct {
	// Format is the output format named in the statement's FORMAT clause, "" when none.
	Format string
	// Select is true for a SELECT, whose output the engine can stream; the others (DESCRIBE,
	// EXPLAIN, SHOW) it answers whole, and their answers are small.
	Select bool
}

// Check checks the syntax tree of one statement, the lines of `EXPLAIN AST <statement>`, and,
// for SHOW, the statement as the engine's formatter normalises it (show is called only then).
func (p *Policy) Check(tree []string, show func() (string, error)) (Statement, error) {
	var st Statement
	if len(tree) == 0 {
		return st, fmt.Errorf("%w: the engine's parser gave no tree", ErrNotAllowed)
	}
	root, _ := strings.CutSuffix(tree[0], " (children "+childrenOf(tree[0])+")")
	kind, _, _ := strings.Cut(root, " ")
	var formats []string
	st.Select = kind == "SelectWithUnionQuery"
	switch {
	case kind == "SelectWithUnionQuery", kind == "DescribeQuery":
	case kind == "Explain" && explainKinds[root]:
	case root == "ShowTables":
		// The tree does not say which SHOW (TABLES, CLUSTERS, MERGES, SETTINGS... all print
		// ShowTables), so the engine's normalised text decides.
		text, err := show()
		if err != nil {
			return st, err
		}
		m := showStatement.FindStringSubmatch(text)
		if m == nil {
			return st, fmt.Errorf("%w: %s (SHOW DATABASES and SHOW TABLES are; query system.tables or system.columns for more)", ErrNotAllowed, text)
		}
		if m[1] != "" {
			if err := p.Format(m[1]); err != nil {
				return st, err
			}
			st.Format = m[1]
		}
		return st, nil
	default:
		return st, fmt.Errorf("%w: a %s statement (SELECT, DESCRIBE, EXPLAIN, SHOW DATABASES and SHOW TABLES are)", ErrNotAllowed, kind)
	}
	for i, line := range tree {
		body := strings.TrimLeft(line, " ")
		depth := len(line) - len(body)
		typ, rest, _ := strings.Cut(body, " ")
		name, _, _ := strings.Cut(rest, " ")
		if !nodeTypes[typ] && (i > 0 || typ != "Explain") {
			return st, fmt.Errorf("%w: the syntax %q (not reviewed; a name with a line break in it is refused too)", ErrNotAllowed, body)
		}
		switch typ {
		case "Function":
			if err := p.Function(name); err != nil {
				return st, err
			}
		case "TableIdentifier":
			if err := p.Table(name); err != nil {
				return st, err
			}
		case "Identifier":
			if err := p.identifier(name); err != nil {
				return st, err
			}
		case "TableExpression":
			// Its first child is the table: a name, a subquery, or a table function.
			if i+1 < len(tree) {
				if next := strings.TrimLeft(tree[i+1], " "); strings.HasPrefix(next, "Function ") {
					fn, _, _ := strings.Cut(strings.TrimPrefix(next, "Function "), " ")
					return st, fmt.Errorf("%w: the table function %s (no table function is)", ErrNotAllowed, fn)
				}
			}
		case "Set":
			return st, fmt.Errorf("%w: a SETTINGS clause (settings are fixed for a read; some may be given as request parameters)", ErrNotAllowed)
		}
		if depth != 1 {
			continue
		}
		// The root's own clauses: the query, and its FORMAT (an Identifier); a Literal here is
		// INTO OUTFILE.
		switch typ {
		case "ExpressionList", "SelectWithUnionQuery", "TableExpression":
		case "Identifier":
			if err := p.Format(name); err != nil {
				return st, err
			}
			formats = append(formats, name)
		default:
			return st, fmt.Errorf("%w: the clause %s of a %s", ErrNotAllowed, typ, kind)
		}
	}
	if len(formats) > 1 {
		return st, fmt.Errorf("%w: several FORMAT clauses %v", ErrNotAllowed, formats)
	}
	if len(formats) == 1 {
		st.Format = formats[0]
	}
	return st, nil
}

// childrenOf returns the N of a tree line's "(children N)" suffix, or "".
func childrenOf(line string) string {
	i := strings.LastIndex(line, " (children ")
	if i < 0 || !strings.HasSuffix(line, ")") {
		return ""
	}
	n := line[i+len(" (children ") : len(line)-1]
	if _, err := strconv.Atoi(n); err != nil {
		return ""
	}
	return n
}

// ReviewedFunctions returns functions.txt's allowed names and every name it lists.
func ReviewedFunctions() (allowed, listed map[string]bool, err error) { return reviewedFunctions() }
