package integration

import (
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/peertrail/peertrail/server"
)

// withSQLPassword puts the SQL password that `peertrail serve` made up under dataDir into
// base's user info, which net/http sends as basic auth.
func withSQLPassword(base, dataDir string) string {
	b, err := os.ReadFile(filepath.Join(dataDir, server.SQLPasswordFileName))
	if err != nil {
		return base
	}
	u, err := url.Parse(base)
	if err != nil {
		return base
	}
	u.User = url.UserPassword("default", strings.TrimSpace(string(b)))
	return u.String()
}
