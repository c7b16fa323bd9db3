package deploy

import (
	"encoding/xml"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/peertrail/peertrail/store/sqlhttp"
)

// The in-cluster ClickHouse server's reader (the user grafana) is held by the server's own
// mechanisms to what peertrail's embedded SQL interface allows: its grants, its profile's
// limits and constraints, and the server's access-control settings. No modern ClickHouse server
// installs on these machines, so this reads the shipped XML; SECURITY.md says where the two
// differ.
func TestClickHouseReaderMatchesTheSQLInterface(t *testing.T) {
	type constraint struct {
		XMLName  xml.Name
		Min      string    `xml:"min"`
		Max      string    `xml:"max"`
		Readonly *struct{} `xml:"readonly"`
	}
	var users struct {
		Users struct {
			Grafana struct {
				Profile string   `xml:"profile"`
				Grants  []string `xml:"grants>query"`
			} `xml:"grafana"`
		} `xml:"users"`
		Profiles struct {
			Grafana struct {
				Readonly                    string `xml:"readonly"`
				MaxExecutionTime            string `xml:"max_execution_time"`
				MaxMemoryUsage              string `xml:"max_memory_usage"`
				MaxResultBytes              string `xml:"max_result_bytes"`
				MaxRowsToRead               string `xml:"max_rows_to_read"`
				AllowIntrospectionFunctions string `xml:"allow_introspection_functions"`
				Constraints                 struct {
					All []constraint `xml:",any"`
				} `xml:"constraints"`
			} `xml:"grafana"`
		} `xml:"profiles"`
	}
	read := func(name string, v any) {
		b, err := os.ReadFile(filepath.Join("overlays", "clickhouse", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := xml.Unmarshal(b, v); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	read("users.xml", &users)
	g, p := users.Users.Grafana, users.Profiles.Grafana
	if g.Profile != "grafana" {
		t.Errorf("grafana's profile is %q", g.Profile)
	}
	// SELECT on the peertrail database, and on the system tables the SQL interface allows
	// that the server does not give everyone.
	want := []string{"GRANT SELECT ON peertrail.*"}
	for _, tbl := range sqlhttp.AllowedTables {
		if !slices.Contains([]string{"system.tables", "system.columns", "system.databases", "system.one"}, tbl) {
			want = append(want, "GRANT SELECT ON "+tbl)
		}
	}
	if !slices.Equal(g.Grants, want) {
		t.Errorf("grafana's grants: %q, want %q", g.Grants, want)
	}
	if p.Readonly != "2" || p.AllowIntrospectionFunctions != "0" {
		t.Errorf("grafana's profile: readonly %q, allow_introspection_functions %q", p.Readonly, p.AllowIntrospectionFunctions)
	}
	limits := map[string]string{"max_execution_time": "30", "max_memory_usage": p.MaxMemoryUsage,
		"max_rows_to_read": p.MaxRowsToRead, "max_result_bytes": p.MaxResultBytes, "max_threads": ""}
	if p.MaxExecutionTime != "30" || p.MaxMemoryUsage != "1073741824" || p.MaxResultBytes != "268435456" || p.MaxRowsToRead != "10000000000" {
		t.Errorf("grafana's limits differ from the SQL interface's defaults: %+v", p)
	}
	fixed := map[string]bool{"timeout_overflow_mode": true, "read_overflow_mode": true, "result_overflow_mode": true,
		"allow_introspection_functions": true, "format_schema": true, "output_format_schema": true, "format_schema_source": true,
		"format_template_resultset": true, "format_template_row": true, "format_template_rows_between_delimiter": true}
	seen := map[string]bool{}
	for _, c := range p.Constraints.All {
		name := c.XMLName.Local
		seen[name] = true
		switch {
		case fixed[name]:
			if c.Readonly == nil {
				t.Errorf("the constraint on %s is not readonly", name)
			}
		case limits[name] != "" || name == "max_threads":
			if c.Min != "1" || c.Max == "" || (limits[name] != "" && c.Max != limits[name]) {
				t.Errorf("the constraint on %s: min %q max %q, want 1 and %q", name, c.Min, c.Max, limits[name])
			}
		default:
			t.Errorf("a constraint on %s, which this test does not know", name)
		}
	}
	for name := range limits {
		if !seen[name] {
			t.Errorf("no constraint on %s: a reader could lift it", name)
		}
	}
	for name := range fixed {
		if !seen[name] {
			t.Errorf("no constraint on %s", name)
		}
	}

	var cfg struct {
		Access struct {
			System   string `xml:"select_from_system_db_requires_grant"`
			InfoSch  string `xml:"select_from_information_schema_requires_grant"`
			Replaces string `xml:"settings_constraints_replace_previous"`
		} `xml:"access_control_improvements"`
		UserFiles    string `xml:"user_files_path"`
		FormatSchema string `xml:"format_schema_path"`
	}
	read("config.xml", &cfg)
	if cfg.Access.System != "true" || cfg.Access.InfoSch != "true" || cfg.Access.Replaces != "true" {
		t.Errorf("config.xml's access_control_improvements: %+v", cfg.Access)
	}
	if !strings.HasPrefix(cfg.UserFiles, "/var/lib/clickhouse/") || !strings.HasPrefix(cfg.FormatSchema, "/var/lib/clickhouse/") {
		t.Errorf("config.xml's file directories: %q %q", cfg.UserFiles, cfg.FormatSchema)
	}
}
