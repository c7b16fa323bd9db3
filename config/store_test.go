package config

import (
	"strings"
	"testing"
	"time"
)

// TestValidateFlushInterval: the store's flush interval is at least a second; a late window
// shorter than it (a test's, a replay's) is no reason to refuse the default.
func TestValidateFlushInterval(t *testing.T) {
	for _, c := range []struct {
		flush, late time.Duration
		want        string
	}{
		{0, 0, ""}, // the library's default
		{time.Second, 0, ""},
		{15 * time.Second, 0, ""},
		{15 * time.Second, 2 * time.Second, ""},
		{time.Hour, 0, ""},
		{500 * time.Millisecond, 0, "at least 1s"},
	} {
		f := Defaults()
		f.APIServers = []APIServer{{Name: "kas-a"}}
		f.Store.FlushInterval = Duration(c.flush)
		if c.late > 0 {
			f.Correlate.LateWindow = Duration(c.late)
		}
		err := f.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("flushInterval %v, late window %v: %v", c.flush, c.late, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("flushInterval %v: %v, want an error saying %q", c.flush, err, c.want)
		}
	}
}

// TestStoreFlushIntervalWithinTheLateWindow: serve flushes at most every half late window, so a
// final chain is stored before it may leave memory; otherwise as configured, zero as the
// default.
func TestStoreFlushIntervalWithinTheLateWindow(t *testing.T) {
	for _, c := range []struct {
		flush, late, want time.Duration
	}{
		{15 * time.Second, 5 * time.Minute, 15 * time.Second},
		{15 * time.Second, 2 * time.Second, time.Second},
		{0, 2 * time.Second, time.Second},
		{0, 5 * time.Minute, 15 * time.Second}, // zero is the default, not half the late window
		{0, 0, 15 * time.Second},
		{4 * time.Minute, 5 * time.Minute, 150 * time.Second},
	} {
		f := Defaults()
		f.Store.FlushInterval, f.Correlate.LateWindow = Duration(c.flush), Duration(c.late)
		if got := f.StoreFlushInterval(); got != c.want {
			t.Errorf("flushInterval %v, late window %v: serve flushes every %v, want %v", c.flush, c.late, got, c.want)
		}
	}
}
