#!/usr/bin/env bash
# govulncheck over the module, against the Go vulnerability database as the golang.org/x/vulndb
# module ships it (the only registry this project's machines reach is the Go module proxy, so
# the database is built locally from the module's OSV files, pinned, and cached).
set -euo pipefail
cd "$(dirname "$0")/.."

VULNDB_VERSION=v0.0.0-20261105234957-e22db6528018
GOVULNCHECK_VERSION=v1.9.0
cache="${PEERTRAIL_CACHE:-$HOME/.cache/peertrail}/vulndb/$VULNDB_VERSION"

if [ ! -f "$cache/index/db.json" ]; then
  echo "govulncheck: building the vulnerability database from golang.org/x/vulndb@$VULNDB_VERSION" >&2
  src="$(go mod download -json "golang.org/x/vulndb@$VULNDB_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')"
  [ -d "$src/data/osv" ] || { echo "govulncheck: no data/osv in $src" >&2; exit 1; }
  rm -rf "$cache.tmp"
  go run "golang.org/x/vulndb/cmd/indexdb@$VULNDB_VERSION" -vulns "$src/data/osv" -out "$cache.tmp"
  rm -rf "$cache"
  mv "$cache.tmp" "$cache"
fi
exec go run "golang.org/x/vuln/cmd/govulncheck@$GOVULNCHECK_VERSION" -db "file://$cache" ./...
