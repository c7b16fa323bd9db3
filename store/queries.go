package store

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strings"
	"time"
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

//go:embed queries/*.sql
var queryFiles embed.FS

// NamedQuery is one canned query.
type NamedQuery struct {
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

// Queries returns the canned queries, sorted by name.
func Queries() ([]NamedQuery, error) {
	entries, err := fs.ReadDir(queryFiles, "queries")
	if err != nil {
		return nil, err
	}
	var out []NamedQuery
	for _, e := range entries {
		b, err := queryFiles.ReadFile(path.Join("queries", e.Name()))
		if err != nil {
			return nil, err
		}
		q, err := parseNamedQuery(strings.TrimSuffix(e.Name(), ".sql"), string(b))
		if err != nil {
			return nil, err
		}
		out = append(out, q)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// QueryNamed returns the canned query called name.
func QueryNamed(name string) (NamedQuery, error) {
	qs, err := Queries()
	if err != nil {
		return NamedQuery{}, err
	}
	var names []string
	for _, q := range qs {
		if q.Name == name {
			return q, nil
		}
		names = append(names, q.Name)
	}
	return NamedQuery{}, fmt.Errorf("store: no query named %q (there are: %s)", name, strings.Join(names, ", "))
}

func parseNamedQuery(name, text string) (NamedQuery, error) {
	q := NamedQuery{Name: name, Report: true, SQL: strings.TrimSpace(text)}
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
					return q, fmt.Errorf("store: query %s: -- default: wants a parameter and a value", name)
				}
				if q.Defaults == nil {
					q.Defaults = map[string]string{}
				}
				q.Defaults[param] = strings.TrimSpace(value)
			default:
				return q, fmt.Errorf("store: query %s: unknown header %q", name, m[1])
			}
			continue
		}
		if cont := strings.TrimSpace(strings.TrimPrefix(line, "--")); last == "description" && cont != "" {
			q.Description += " " + cont
		}
	}
	if q.Title == "" {
		return q, fmt.Errorf("store: query %s has no -- title: header", name)
	}
	q.types = map[string]string{}
	for _, m := range placeholder.FindAllStringSubmatch(q.SQL, -1) {
		t := strings.TrimSpace(m[2])
		if prev, ok := q.types[m[1]]; ok {
			if prev != t {
				return q, fmt.Errorf("store: query %s: parameter %s is %s and %s", name, m[1], prev, t)
			}
			continue
		}
		q.types[m[1]] = t
		q.Params = append(q.Params, m[1])
	}
	sort.Strings(q.Params)
	for p := range q.Defaults {
		if _, ok := q.types[p]; !ok {
			return q, fmt.Errorf("store: query %s: a default for %s, which it does not use", name, p)
		}
	}
	if q.Report {
		for _, p := range q.Params {
			if _, ok := q.Defaults[p]; !ok && p != "since" && p != "until" {
				return q, fmt.Errorf("store: query %s is in the report but needs parameter %q", name, p)
			}
		}
	}
	return q, nil
}

// Window returns the since and until parameters for the last d before now.
func Window(now time.Time, d time.Duration) map[string]string {
	return map[string]string{"since": FormatTime(now.Add(-d)), "until": FormatTime(now)}
}

// Run runs the query on s with params; a parameter the query needs and params lacks is an
// error that names it. Unlike Store.Query, Run takes a String parameter as the plain value
// (an auditID exactly as the client sent it) and escapes it; parameters of other types are in
// ClickHouse's text form (DateTime64 as FormatTime writes it). Parameters the query does not
// use are ignored.
func (q NamedQuery) Run(ctx context.Context, s Store, params map[string]string) (*Result, error) {
	used := map[string]string{}
	for _, p := range q.Params {
		v, ok := params[p]
		if !ok {
			if v, ok = q.Defaults[p]; !ok {
				return nil, fmt.Errorf("store: query %s needs parameter %q", q.Name, p)
			}
		}
		if unwrapType(q.types[p]) == "String" {
			v = EscapeTSV(v)
		}
		used[p] = v
	}
	r, err := s.Query(ctx, q.SQL, used)
	if err != nil {
		return nil, fmt.Errorf("store: query %s: %w", q.Name, err)
	}
	return r, nil
}

// Text returns the query's SQL without its header comments, each placeholder {name:Type}
// replaced by with[name]: a Grafana macro or variable, so that a dashboard panel asks the same
// question with the same text (`$__fromTime` for since, `${audit_id:sqlstring}` for an
// auditID). A placeholder without a replacement is an error naming it.
func (q NamedQuery) Text(with map[string]string) (string, error) {
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
		return "", fmt.Errorf("store: query %s: no replacement for %s", q.Name, strings.Join(missing, ", "))
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
