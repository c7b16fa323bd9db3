// Package queries holds peertrail's named queries: one question each, as SQL in a file of this
// directory, asked with the same text by the chain API and `peertrail report` (through
// package store, which runs them) and by the Grafana dashboards (package dashboards, through
// Text). It depends on nothing but the standard library, so that what renders a dashboard
// does not link a ClickHouse engine.
package queries

import (
	"embed"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strings"
)

// The canned investigations live as SQL files in store/queries, one query each, named by the
// file. A header of "-- key: value" comment lines describes it:
//
//	-- title: Misleading 404s by resource
//	-- report: no          (leave it out of `peertrail report`; default yes)
//	-- default: limit 100  (a parameter's value when the caller gives none; repeatable)
//	-- description: what it shows, continued on
//	--   indented comment lines
//
// Parameters are ClickHouse placeholders in the text ({since:DateTime64(6, 'UTC')}); the
// report fills since and until.

//go:embed *.sql
var files embed.FS

// Query is one canned query.
type Query struct {
	Name        string
	Title       string
	Description string
	// Report says whether `peertrail report` runs it (it needs no parameter but since and
	// until).
	Report bool
	// Params are the names of its placeholders, sorted.
	Params []string
	// Defaults are the values of parameters a caller may leave out.
	Defaults map[string]string
	SQL      string
	// types are the placeholders' ClickHouse types, by name.
	types map[string]string
}

var (
	headerLine  = regexp.MustCompile(`^--\s*([a-z]+):\s*(.*)$`)
	placeholder = regexp.MustCompile(`\{([A-Za-z_][A-Za-z0-9_]*):\s*([^}]+)\}`)
)

// All returns the canned queries, sorted by name.
func All() ([]Query, error) {
	entries, err := fs.ReadDir(files, ".")
	if err != nil {
		return nil, err
	}
	var out []Query
	for _, e := range entries {
		b, err := files.ReadFile(e.Name())
		if err != nil {
			return nil, err
		}
		q, err := Parse(strings.TrimSuffix(e.Name(), ".sql"), string(b))
		if err != nil {
			return nil, err
		}
		out = append(out, q)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Named returns the canned query called name.
func Named(name string) (Query, error) {
	qs, err := All()
	if err != nil {
		return Query{}, err
	}
	var names []string
	for _, q := range qs {
		if q.Name == name {
			return q, nil
		}
		names = append(names, q.Name)
	}
	return Query{}, fmt.Errorf("queries: no query named %q (there are: %s)", name, strings.Join(names, ", "))
}

// Parse reads a query's text (its header and SQL); name is what its file would be called.
func Parse(name, text string) (Query, error) {
	q := Query{Name: name, Report: true, SQL: strings.TrimSpace(text)}
	var last string
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, "--") {
			break
		}
		if m := headerLine.FindStringSubmatch(line); m != nil {
			last = m[1]
			switch m[1] {
			case "title":
				q.Title = m[2]
			case "description":
				q.Description = m[2]
			case "report":
				q.Report = m[2] != "no"
			case "default":
				param, value, ok := strings.Cut(strings.TrimSpace(m[2]), " ")
				if !ok {
					return q, fmt.Errorf("queries: query %s: -- default: wants a parameter and a value", name)
				}
				if q.Defaults == nil {
					q.Defaults = map[string]string{}
				}
				q.Defaults[param] = strings.TrimSpace(value)
			default:
				return q, fmt.Errorf("queries: query %s: unknown header %q", name, m[1])
			}
			continue
		}
		if cont := strings.TrimSpace(strings.TrimPrefix(line, "--")); last == "description" && cont != "" {
			q.Description += " " + cont
		}
	}
	if q.Title == "" {
		return q, fmt.Errorf("queries: query %s has no -- title: header", name)
	}
	q.types = map[string]string{}
	for _, m := range placeholder.FindAllStringSubmatch(q.SQL, -1) {
		t := strings.TrimSpace(m[2])
		if prev, ok := q.types[m[1]]; ok {
			if prev != t {
				return q, fmt.Errorf("queries: query %s: parameter %s is %s and %s", name, m[1], prev, t)
			}
			continue
		}
		q.types[m[1]] = t
		q.Params = append(q.Params, m[1])
	}
	sort.Strings(q.Params)
	for p := range q.Defaults {
		if _, ok := q.types[p]; !ok {
			return q, fmt.Errorf("queries: query %s: a default for %s, which it does not use", name, p)
		}
	}
	if q.Report {
		for _, p := range q.Params {
			if _, ok := q.Defaults[p]; !ok && p != "since" && p != "until" {
				return q, fmt.Errorf("queries: query %s is in the report but needs parameter %q", name, p)
			}
		}
	}
	return q, nil
}

// Type is the ClickHouse type of the placeholder param ("" when the query has none).
func (q Query) Type(param string) string { return q.types[param] }

// Text returns the query's SQL without its header comments, each placeholder {name:Type}
// replaced by with[name]: a Grafana macro or variable, so that a dashboard panel asks the same
// question with the same text (`$__fromTime` for since, `${audit_id:sqlstring}` for an
// auditID). A placeholder without a replacement is an error naming it.
func (q Query) Text(with map[string]string) (string, error) {
	var missing []string
	body := placeholder.ReplaceAllStringFunc(q.SQL, func(m string) string {
		name := placeholder.FindStringSubmatch(m)[1]
		v, ok := with[name]
		if !ok {
			missing = append(missing, name)
			return m
		}
		return v
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("queries: query %s: no replacement for %s", q.Name, strings.Join(missing, ", "))
	}
	var lines []string
	header := true
	for _, l := range strings.Split(body, "\n") {
		if header && strings.HasPrefix(l, "--") {
			continue
		}
		header = false
		lines = append(lines, l)
	}
	return strings.TrimSpace(strings.Join(lines, "\n")), nil
}
