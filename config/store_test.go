package config

import (
	"strings"
	"testing"
	"time"
)

// TestValidateFlushInterval: the store's flush interval is at least a second and below the
// late window, after which a final chain may leave memory whether or not it was stored.
func TestValidateFlushInterval(t *testing.T) {
	for fi, want := range map[time.Duration]string{
		0:                      "", // the library's default
		time.Second:            "",
		15 * time.Second:       "",
		4 * time.Minute:        "",
		500 * time.Millisecond: "at least 1s",
		5 * time.Minute:        "below the late window",
		time.Hour:              "below the late window",
	} {
		f := Defaults()
		f.APIServers = []APIServer{{Name: "kas-a"}}
		f.Store.FlushInterval = Duration(fi)
		err := f.Validate()
		switch {
		case want == "" && err != nil:
			t.Errorf("flushInterval %v: %v", fi, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("flushInterval %v: %v, want an error saying %q", fi, err, want)
		}
	}
}
