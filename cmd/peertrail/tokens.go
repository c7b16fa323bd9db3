package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// readTokenDir reads the apiservers' own bearer tokens from dir: a file per apiserver, named
// after it (kas-a, or kas-a.token), holding its token, as apiservers[].tokenFile of serve's
// configuration points at. peertrail takes a token as one apiserver's only, so traffic that
// posts as several apiservers needs a token for each.
func readTokenDir(dir string) (map[string]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("token directory: %w", err)
	}
	tokens := map[string]string{}
	for _, e := range entries {
		if !e.Type().IsRegular() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("token directory: %w", err)
		}
		t := strings.TrimSpace(string(b))
		if t == "" {
			return nil, fmt.Errorf("token directory: %s is empty", filepath.Join(dir, e.Name()))
		}
		tokens[strings.TrimSuffix(e.Name(), ".token")] = t
	}
	if len(tokens) == 0 {
		return nil, fmt.Errorf("token directory %s holds no token file", dir)
	}
	return tokens, nil
}
