#!/usr/bin/env bash
# fetch-chdb.sh: put the pinned chDB engine library (libchdb.so) in the local
# cache and print its path on stdout.
#
#   ${PEERTRAIL_CACHE:-$HOME/.cache/peertrail}/chdb/<version>/libchdb.so
#
# The library (ClickHouse as a shared object, ~566 MB) comes from the npm
# package @chdb/lib-linux-x64-gnu, pinned below: the npm "latest" tag points at
# an older release. It is far too big to commit, so it lives in the cache and
# is reused between runs.
#
# Idempotent: when the cached file is already there and looks right, nothing is
# downloaded. Atomic: the download is unpacked and verified in a temporary
# directory next to the destination and only then renamed into place, so an
# interrupted run never leaves a partial libchdb.so behind.
#
# Verification: the file must be an ELF 64-bit shared object (ET_DYN), export
# the chdb_connect symbol, and match the pinned SHA-256.
#
# Usage: scripts/fetch-chdb.sh          # prints the library path
#        export CHDB_LIB_PATH="$(scripts/fetch-chdb.sh)"
set -euo pipefail

CHDB_NPM_PACKAGE="@chdb/lib-linux-x64-gnu"
CHDB_VERSION="26.7.3-stable.1"
# sha256 and size of package/libchdb.so in the tarball above (ClickHouse 26.7.2.1).
CHDB_SHA256="36ad4e999882821ef13cf2d0f52c93f48e6ee1b4498b35a201c23ce4b8d15bf5"
CHDB_SIZE=566330096

log() { printf 'fetch-chdb: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

case "$(uname -s)/$(uname -m)" in
Linux/x86_64) ;;
*) die "only linux x86_64 is supported (the pinned package is ${CHDB_NPM_PACKAGE}), got $(uname -s)/$(uname -m)" ;;
esac

cache_root="${PEERTRAIL_CACHE:-${HOME}/.cache/peertrail}"
dest_dir="${cache_root}/chdb/${CHDB_VERSION}"
dest="${dest_dir}/libchdb.so"

# is_elf_shared_object FILE: ELF magic, 64-bit, little endian, e_type == ET_DYN (3).
is_elf_shared_object() {
	local hdr
	hdr="$(od -An -tx1 -N18 -v "$1" 2>/dev/null | tr -d ' \n')" || return 1
	# bytes 0-3 magic, 4 class (02 = 64-bit), 5 data (01 = LSB), 16-17 e_type (03 00)
	[[ "${hdr:0:8}" == "7f454c46" && "${hdr:8:2}" == "02" && "${hdr:10:2}" == "01" && "${hdr:32:4}" == "0300" ]]
}

# exports_chdb_connect FILE: chdb_connect is a defined dynamic symbol.
exports_chdb_connect() {
	if command -v nm >/dev/null 2>&1; then
		nm -D --defined-only "$1" 2>/dev/null | awk '$3 == "chdb_connect" { found = 1 } END { exit !found }'
	elif command -v readelf >/dev/null 2>&1; then
		readelf --wide --dyn-syms "$1" 2>/dev/null | awk '$7 != "UND" && $8 == "chdb_connect" { found = 1 } END { exit !found }'
	else
		die "need nm or readelf (Debian: apt-get install binutils) to verify the library"
	fi
}

file_size() { stat -c %s "$1"; }

# Fast path: already cached. Checks that are cheap on a 566 MB file (header,
# size, exported symbol); the full SHA-256 is checked once, when downloading.
if [[ -f "$dest" ]]; then
	if is_elf_shared_object "$dest" && [[ "$(file_size "$dest")" == "$CHDB_SIZE" ]] && exports_chdb_connect "$dest"; then
		printf '%s\n' "$dest"
		exit 0
	fi
	log "cached ${dest} fails verification; downloading it again"
fi

command -v npm >/dev/null 2>&1 || die "npm is required to download ${CHDB_NPM_PACKAGE}@${CHDB_VERSION}"
command -v tar >/dev/null 2>&1 || die "tar is required"
command -v sha256sum >/dev/null 2>&1 || die "sha256sum is required"

mkdir -p "$dest_dir"
# Same directory as the destination, so the final mv is a rename on one filesystem.
tmp="$(mktemp -d "${dest_dir}/.fetch.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

log "downloading ${CHDB_NPM_PACKAGE}@${CHDB_VERSION} (~178 MB) with npm pack"
# A private npm cache inside tmp: the tarball is not kept twice on disk.
tarball="$(cd "$tmp" && npm pack "${CHDB_NPM_PACKAGE}@${CHDB_VERSION}" \
	--pack-destination "$tmp" --cache "$tmp/npm-cache" --silent --no-fund --no-audit | tail -n 1)"
[[ -n "$tarball" && -f "$tmp/$tarball" ]] || die "npm pack ${CHDB_NPM_PACKAGE}@${CHDB_VERSION} produced no tarball"

log "extracting libchdb.so"
tar -xzf "$tmp/$tarball" -C "$tmp" package/libchdb.so || die "package/libchdb.so is not in $tarball"
rm -f "$tmp/$tarball"
lib="$tmp/package/libchdb.so"

is_elf_shared_object "$lib" || die "$lib is not an ELF 64-bit shared object"
exports_chdb_connect "$lib" || die "$lib does not export chdb_connect"
got="$(sha256sum "$lib" | awk '{print $1}')"
[[ "$got" == "$CHDB_SHA256" ]] || die "sha256 mismatch for libchdb.so: got $got, want $CHDB_SHA256"

chmod 0755 "$lib"
touch "$lib" # the tarball dates its files 1985; keep age-based cache cleaners away
mv -f "$lib" "$dest"
log "installed $dest"
printf '%s\n' "$dest"
