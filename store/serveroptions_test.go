package store

import "testing"

// TestHTTPSDSNMeansTLS: https:// names a TLS SQL interface (serve's off loopback) by itself;
// clickhouse-go wants secure=true as well and refuses the DSN without it.
func TestHTTPSDSNMeansTLS(t *testing.T) {
	for _, dsn := range []string{"https://127.0.0.1:8443", "https://u:p%40ss@127.0.0.1:8443/?dial_timeout=5s", "https://127.0.0.1:8443?secure=true"} {
		o := ServerOptions{DSN: dsn}
		opts, err := o.ClickHouseOptions()
		if err != nil {
			t.Fatalf("%s: %v", dsn, err)
		}
		if opts.TLS == nil {
			t.Errorf("%s: no TLS", dsn)
		}
		if dsn == "https://u:p%40ss@127.0.0.1:8443/?dial_timeout=5s" && (opts.Auth.Username != "u" || opts.Auth.Password != "p@ss" || opts.DialTimeout.String() != "5s") {
			t.Errorf("%s: user %q password %q dial timeout %s", dsn, opts.Auth.Username, opts.Auth.Password, opts.DialTimeout)
		}
	}
	for _, dsn := range []string{"http://127.0.0.1:8123", "https://127.0.0.1:8443?secure=false"} {
		o := ServerOptions{DSN: dsn}
		if opts, err := o.ClickHouseOptions(); err == nil && opts.TLS != nil {
			t.Errorf("%s: TLS on", dsn)
		}
	}
}
