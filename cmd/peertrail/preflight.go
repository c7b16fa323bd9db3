package main

import (
	"crypto/tls"
	"errors"
	"net"
	"os"
	"syscall"

	"github.com/peertrail/peertrail/config"
	"github.com/peertrail/peertrail/store/chdb"
)

// preflight checks what serve needs from outside its data directory before anything is
// created, migrated or started there: certificates and keys that load, files that can be
// read, addresses that are free, the embedded engine's library. server.New checks them again
// as it starts; this is what lets a wrong command line fail without a side effect.
func preflight(cfg config.File) error {
	const hint = "see peertrail serve --help"
	if cfg.InsecureHTTP {
		for _, l := range []struct{ flag, addr string }{{"--listen", cfg.Listen}, {"--api-listen", cfg.APIListen}} {
			if l.addr == "" {
				continue
			}
			if !loopbackAddr(l.addr) {
				return errorf(exitUsage, "use e.g. 127.0.0.1:8443, or TLS (--tls-cert-file, --tls-key-file)",
					"--insecure-http serves plain HTTP on loopback only, and %s %s is not loopback", l.flag, l.addr)
			}
		}
	} else {
		if cfg.TLS.CertFile == "" || cfg.TLS.KeyFile == "" {
			return errorf(exitUsage, "or --insecure-http for a trial on loopback; "+hint,
				"serve speaks TLS and needs --tls-cert-file and --tls-key-file")
		}
		if _, err := tls.LoadX509KeyPair(cfg.TLS.CertFile, cfg.TLS.KeyFile); err != nil {
			return errorf(exitUsage, "--tls-cert-file and --tls-key-file take PEM files", "serving certificate: %v", err)
		}
	}
	for _, f := range []struct{ flag, path string }{
		{"--client-ca-file", cfg.TLS.ClientCAFile},
		{"--reader-client-ca-file", cfg.Readers.ClientCAFile},
		{"--reader-token-file", cfg.Readers.TokenFile},
		{"--sql-password-file", cfg.Store.SQLPasswordFile},
		{"--clickhouse-password-file", cfg.Store.PasswordFile},
	} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			return errorf(exitUsage, hint, "%s: %v", f.flag, err)
		}
	}
	for _, a := range cfg.APIServers {
		if a.TokenFile == "" {
			continue
		}
		if _, err := os.Stat(a.TokenFile); err != nil {
			return errorf(exitUsage, "apiservers[].tokenFile in --config", "apiserver %s: token file: %v", a.Name, err)
		}
	}
	for _, a := range cfg.Agents {
		if a.TokenFile == "" {
			continue
		}
		if _, err := os.Stat(a.TokenFile); err != nil {
			return errorf(exitUsage, "agents[].tokenFile in --config", "agent %s: token file: %v", a.Name, err)
		}
	}
	if cfg.Store.Engine == "embedded" {
		if _, err := chdb.FindLibrary(cfg.Store.LibPath); err != nil {
			return errorf(exitUsage, "run scripts/fetch-chdb.sh, or give --chdb-lib or $CHDB_LIB_PATH; --store none runs without a store",
				"the embedded store's engine, libchdb.so, is not here")
		}
	}
	addrs := []struct{ flag, addr string }{{"--listen", cfg.Listen}, {"--api-listen", cfg.APIListen}}
	if cfg.Store.Engine == "embedded" {
		addrs = append(addrs, struct{ flag, addr string }{"--sql-listen", cfg.Store.SQLListen})
	}
	for _, a := range addrs {
		if a.addr == "" {
			continue
		}
		ln, err := net.Listen("tcp", a.addr)
		if err != nil {
			if errors.Is(err, syscall.EADDRINUSE) {
				return errorf(exitFailure, "another process listens there: give "+a.flag+" another address, e.g. 127.0.0.1:0 for a free port",
					"%s %s: address already in use", a.flag, a.addr)
			}
			return errorf(exitUsage, a.flag+" takes host:port", "%s %s: %v", a.flag, a.addr, err)
		}
		ln.Close()
	}
	return nil
}

func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
