package config

import (
	"strings"
	"testing"
)

// TestValidateAgents: an agent is named once, always authenticated, and relays configured
// apiservers that no other agent relays; a certificate subject names one apiserver or agent.
func TestValidateAgents(t *testing.T) {
	apiservers := []APIServer{{Name: "kas-a", CertSubject: "kas-a-audit"}, {Name: "kas-b"}}
	for name, c := range map[string]struct {
		agents []Agent
		edit   func(*File)
		want   string // "" when valid
	}{
		"two agents, a token and a certificate": {[]Agent{
			{Name: "node-a", APIServers: []string{"kas-a"}, TokenFile: "a"},
			{Name: "node-b", APIServers: []string{"kas-b"}, CertSubject: "node-b-agent"}}, nil, ""},
		"an agent named twice": {[]Agent{
			{Name: "node-a", APIServers: []string{"kas-a"}, TokenFile: "a"},
			{Name: "node-a", APIServers: []string{"kas-b"}, TokenFile: "b"}}, nil, "duplicate name"},
		"an agent without a credential": {[]Agent{{Name: "node-a", APIServers: []string{"kas-a"}}}, nil, "always authenticated"},
		"an agent without apiservers":   {[]Agent{{Name: "node-a", TokenFile: "a"}}, nil, "no apiservers"},
		"an apiserver relayed by two agents": {[]Agent{
			{Name: "node-a", APIServers: []string{"kas-a"}, TokenFile: "a"},
			{Name: "node-b", APIServers: []string{"kas-a"}, TokenFile: "b"}}, nil, "relayed by agents node-a and node-b"},
		"an apiserver not configured": {[]Agent{{Name: "node-a", APIServers: []string{"kas-z"}, TokenFile: "a"}}, nil, "does not name"},
		"an apiserver not configured, unknown ones accepted": {[]Agent{{Name: "node-a", APIServers: []string{"kas-z"}, TokenFile: "a"}},
			func(f *File) { f.AcceptUnknownAPIServers = true }, ""},
		"an agent with an apiserver's certificate subject": {[]Agent{{Name: "node-a", APIServers: []string{"kas-a"}, CertSubject: "kas-a-audit"}}, nil, "already names"},
		"an agent name that is no label":                   {[]Agent{{Name: "Node_A", APIServers: []string{"kas-a"}, TokenFile: "a"}}, nil, "lowercase"},
		"a deduplicated embedded store":                    {nil, func(f *File) { f.Store.Deduplicate = true }, "needs --store clickhouse"},
		"a deduplicated cluster": {nil, func(f *File) {
			f.Store.Engine, f.Store.DSN, f.Store.Cluster, f.Store.Deduplicate = "clickhouse", "http://ch:8123", "c", true
		}, "one shared ClickHouse server"},
	} {
		f := Defaults()
		f.APIServers, f.Agents = apiservers, c.agents
		if c.edit != nil {
			c.edit(&f)
		}
		err := f.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want an error naming %q", name, err, c.want)
		}
	}
}
