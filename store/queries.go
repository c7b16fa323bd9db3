package store

import (
	"context"
	"fmt"
	"time"

	"github.com/peertrail/peertrail/store/queries"
)

// NamedQuery is one canned query of package queries (store/queries/*.sql: the header that
// describes it, its parameters, its SQL), which the store runs.
type NamedQuery struct{ queries.Query }

// Queries returns the canned queries, sorted by name.
func Queries() ([]NamedQuery, error) {
	qs, err := queries.All()
	if err != nil {
		return nil, err
	}
	out := make([]NamedQuery, len(qs))
	for i, q := range qs {
		out[i] = NamedQuery{q}
	}
	return out, nil
}

// QueryNamed returns the canned query called name.
func QueryNamed(name string) (NamedQuery, error) {
	q, err := queries.Named(name)
	return NamedQuery{q}, err
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
		if unwrapType(q.Type(p)) == "String" {
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
