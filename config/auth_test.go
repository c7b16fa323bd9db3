package config

import (
	"strings"
	"testing"
)

// TestValidateAuth: a credential must name one apiserver, and readers need a CA of their own.
func TestValidateAuth(t *testing.T) {
	two := []APIServer{{Name: "kas-a"}, {Name: "kas-b"}}
	for name, c := range map[string]struct {
		edit func(*File)
		want string // "" when valid
	}{
		"per-apiserver tokens": {func(f *File) {
			f.APIServers = []APIServer{{Name: "kas-a", TokenFile: "a"}, {Name: "kas-b", TokenFile: "b"}}
		}, ""},
		"a shared token with one apiserver": {func(f *File) {
			f.APIServers, f.TLS.TokenFile = two[:1], "t"
		}, ""},
		"a shared token with two apiservers": {func(f *File) {
			f.APIServers, f.TLS.TokenFile = two, "t"
		}, "apiservers[].tokenFile"},
		"a shared token with unknown apiservers accepted": {func(f *File) {
			f.APIServers, f.TLS.TokenFile, f.AcceptUnknownAPIServers = two[:1], "t", true
		}, "apiservers[].tokenFile"},
		"a shared token with no apiserver configured": {func(f *File) {
			f.TLS.TokenFile = "t"
		}, "apiservers[].tokenFile"},
		"a shared token and the apiserver's own": {func(f *File) {
			f.APIServers, f.TLS.TokenFile = []APIServer{{Name: "kas-a", TokenFile: "a"}}, "t"
		}, "keep its own"},
		"the readers' CA is the apiservers'": {func(f *File) {
			f.TLS.ClientCAFile, f.Readers.ClientCAFile = "ca.crt", "ca.crt"
		}, "--reader-client-ca-file"},
		"a body limit whose records might not fit a spool frame": {func(f *File) {
			f.Limits.MaxBodyBytes, f.Limits.MaxReadingBytes = MaxBodyBytesLimit+1, 8*MaxBodyBytesLimit
		}, "maxBodyBytes"},
		"the largest body limit": {func(f *File) {
			f.Limits.MaxBodyBytes, f.Limits.MaxReadingBytes = MaxBodyBytesLimit, 8*MaxBodyBytesLimit
		}, ""},
		"a reading budget below one body": {func(f *File) {
			f.Limits.MaxReadingBytes = f.Limits.MaxBodyBytes - 1
		}, "maxReadingBytes"},
	} {
		f := Defaults()
		c.edit(&f)
		err := f.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want an error naming %q", name, err, c.want)
		}
	}
}
