package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/peertrail/peertrail/config"
)

// serveFlags returns serve's flags bound to a fresh configuration, parsed from args.
func serveFlags(t *testing.T, args ...string) (*pflag.FlagSet, *config.File) {
	t.Helper()
	cfg := config.Defaults()
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	bindServeFlags(fs, &cfg)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return fs, &cfg
}

func writeConfig(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestConfigFileUnderFlags: the file sets what the command line does not; a flag given on the
// command line wins over the file.
func TestConfigFileUnderFlags(t *testing.T) {
	path := writeConfig(t, `
listen: 10.1.2.3:9443
apiservers:
- {name: kas-a, address: 10.0.0.11, version: v1.35.4}
limits: {maxBodyBytes: 1Mi}
gate: {window: 5m, maxIngestGap: 90s}
`)
	fs, cfg := serveFlags(t, "--listen", "127.0.0.1:9", "--gate-max-ingest-gap", "3m")
	if err := applyConfigFile(fs, path, cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Listen != "127.0.0.1:9" || cfg.Gate.MaxIngestGap != config.Duration(3*time.Minute) {
		t.Errorf("the command line did not win: listen %s, gate max ingest gap %s", cfg.Listen, cfg.Gate.MaxIngestGap)
	}
	if cfg.Gate.Window != config.Duration(5*time.Minute) || cfg.Limits.MaxBodyBytes != 1<<20 ||
		len(cfg.APIServers) != 1 || cfg.APIServers[0].Address != "10.0.0.11" || cfg.APIServers[0].Version != "v1.35.4" {
		t.Errorf("the file was not applied: gate window %s, max body %d, apiservers %+v", cfg.Gate.Window, cfg.Limits.MaxBodyBytes, cfg.APIServers)
	}
	if def := config.Defaults(); cfg.Gate.ForgetAfter != def.Gate.ForgetAfter || cfg.Spool.Fsync != def.Spool.Fsync {
		t.Errorf("what neither sets lost its default: forget after %s, fsync %q", cfg.Gate.ForgetAfter, cfg.Spool.Fsync)
	}
}

func TestConfigFileErrors(t *testing.T) {
	for text, want := range map[string]string{
		"gate: {windw: 5m}\n":                             "windw",
		"apiservers:\n- {name: kas-a}\n- {name: kas-a}\n": "duplicate name",
		"listen: [\n":                                     "config",
	} {
		fs, cfg := serveFlags(t)
		err := applyConfigFile(fs, writeConfig(t, text), cfg)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("config %q: error %v, want one mentioning %q", text, err, want)
		}
	}
}
