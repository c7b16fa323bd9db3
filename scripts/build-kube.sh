#!/usr/bin/env bash
# Build real kube-apiserver binaries from the k8s.io/kubernetes Go module.
#
#   scripts/build-kube.sh [--no-etcd] [--force] [VERSION...]   (default versions: v1.35.4 v1.36.3)
#
# `go install k8s.io/kubernetes/cmd/kube-apiserver@vX` does not work (the kubernetes
# module has replace directives pointing at ./staging). So for each version we
# write a small wrapper module OUTSIDE the repo that requires k8s.io/kubernetes@vX
# and replaces every module of kubernetes' own replace block with the published
# k8s.io/<name> v0.<minor>.<patch>, then `go build` the command from it.
#
# Output: ${PEERTRAIL_CACHE:-$HOME/.cache/peertrail}/kube/<version>/kube-apiserver
# The version is stamped into k8s.io/component-base/version (/version, --version)
# and k8s.io/client-go/pkg/version (the userAgent of the server's own loopback
# client), like the upstream build does. The git commit is not known from the
# module proxy, so it stays empty (userAgent ends in "kubernetes/unknown").
# Idempotent: an existing binary whose --version matches and that was built with
# the same flags (<dir>/kube-apiserver.ldflags) is kept; --force rebuilds.
# By default also makes sure etcd (Debian etcd-server) is installed (--no-etcd to skip).
set -euo pipefail

CACHE="${PEERTRAIL_CACHE:-$HOME/.cache/peertrail}"
WANT_ETCD=1
FORCE=0
VERSIONS=()
for arg in "$@"; do
  case "$arg" in
    --etcd) WANT_ETCD=1 ;;
    --no-etcd) WANT_ETCD=0 ;;
    --force) FORCE=1 ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    v[0-9]*.[0-9]*.[0-9]*) VERSIONS+=("$arg") ;;
    *) echo "build-kube.sh: unknown argument '$arg' (want --no-etcd, --force or versions like v1.36.3)" >&2; exit 2 ;;
  esac
done
if [ "${#VERSIONS[@]}" -eq 0 ]; then
  VERSIONS=(v1.35.4 v1.36.3)
fi

log() { echo "build-kube: $*" >&2; }
die() { echo "build-kube: ERROR: $*" >&2; exit 1; }

command -v go >/dev/null 2>&1 || die "go is not on PATH"

ensure_etcd() {
  if command -v etcd >/dev/null 2>&1 || [ -x /usr/bin/etcd ]; then
    return 0
  fi
  log "etcd not found; installing Debian package etcd-server"
  if [ "$(id -u)" -ne 0 ]; then
    die "etcd is missing and we are not root: run 'apt-get install -y etcd-server' yourself"
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq etcd-server >/dev/null 2>&1 || {
    apt-get update -qq >/dev/null
    apt-get install -y -qq etcd-server >/dev/null
  }
  # Debian's package starts an etcd service on 2379 where systemd runs; we start our own.
  command -v etcd >/dev/null 2>&1 || [ -x /usr/bin/etcd ] || die "etcd still missing after installing etcd-server"
  log "etcd installed: $(/usr/bin/etcd --version 2>/dev/null | head -1)"
}

# binary_ok BIN VERSION: BIN exists and reports VERSION.
binary_ok() {
  [ -x "$1" ] || return 1
  local out
  out="$("$1" --version 2>/dev/null || true)"
  [ "$out" = "Kubernetes $2" ]
}

build_one() {
  local version="$1"
  local dir="$CACHE/kube/$version"
  local bin="$dir/kube-apiserver"
  [[ "$version" =~ ^v1\.[0-9]+\.[0-9]+$ ]] || die "$version: only release versions v1.X.Y are supported"

  # v1.36.3 -> staging modules are v0.36.3
  local rest="${version#v1.}"          # 36.3
  local major=1 minor="${rest%%.*}"    # 36
  local staging="v0.${rest}"

  # Version stamps, as hack/lib/version.sh sets them (minus the commit).
  local ldflags="-s -w" vpkg
  for vpkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $vpkg.gitVersion=$version -X $vpkg.gitMajor=$major -X $vpkg.gitMinor=$minor"
    ldflags+=" -X $vpkg.gitTreeState=clean -X $vpkg.gitCommit="
  done

  if [ "$FORCE" -eq 0 ] && binary_ok "$bin" "$version" \
     && [ "$(cat "$bin.ldflags" 2>/dev/null || true)" = "$ldflags" ]; then
    log "$version: up to date ($bin)"
    echo "$bin"
    return 0
  fi

  log "$version: resolving k8s.io/kubernetes@$version"
  local json gomod infof
  json="$(GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$version")" \
    || die "$version: 'go mod download k8s.io/kubernetes@$version' failed (is the Go module proxy reachable?)"
  gomod="$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')"
  infof="$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Info": "\(.*\)",\{0,1\}$/\1/p')"
  [ -f "$gomod" ] || die "$version: could not find go.mod of k8s.io/kubernetes@$version (got '$gomod')"

  # Modules of the replace block that point into ./staging.
  local mods
  mods="$(awk '/^replace[[:space:]]*\(/{r=1;next} r&&/^\)/{r=0} r&&/=>[[:space:]]*\.\/staging\//{print $1}' "$gomod")"
  [ -n "$mods" ] || die "$version: no staging replace directives found in $gomod"

  local builddate
  builddate="$(sed -n 's/.*"Time":"\([^"]*\)".*/\1/p' "$infof" 2>/dev/null || true)"
  builddate="${builddate:-1970-01-01T00:00:00Z}"

  local wrap="$dir/wrapper"
  rm -rf "$wrap"
  mkdir -p "$wrap"
  local gover
  # The wrapper is built by the toolchain that reports this version (the repository's pinned
  # one when run from it or from test/run), named explicitly: with GOTOOLCHAIN=local a
  # machine whose own Go is older than the pin refuses the wrapper's go line.
  gover="$(go env GOVERSION)"; gover="${gover#go}"
  local toolchain="go$gover"
  {
    echo "module peertrail.local/kube-build"
    echo
    echo "go $gover"
    echo
    echo "require k8s.io/kubernetes $version"
    echo
    echo "replace ("
    local m
    for m in $mods; do
      echo "	$m => $m $staging"
    done
    echo ")"
  } > "$wrap/go.mod"
  log "$version: wrapper module at $wrap ($(echo "$mods" | wc -l) staging modules -> $staging)"

  local pkg=k8s.io/kubernetes/cmd/kube-apiserver
  local start end
  start="$(date +%s)"
  log "$version: go get (module graph)"
  (cd "$wrap" && GOTOOLCHAIN="$toolchain" GOFLAGS=-mod=mod go get "$pkg@$version" >"$dir/get.log" 2>&1) \
    || { tail -30 "$dir/get.log" >&2; die "$version: go get failed (log: $dir/get.log)"; }
  log "$version: go build (takes several minutes cold)"
  (cd "$wrap" && GOTOOLCHAIN="$toolchain" CGO_ENABLED=0 GOFLAGS="-mod=mod -buildvcs=false" \
     go build -trimpath -ldflags "$ldflags -X k8s.io/component-base/version.buildDate=$builddate -X k8s.io/client-go/pkg/version.buildDate=$builddate" -o "$bin.tmp" "$pkg" >"$dir/build.log" 2>&1) \
    || { tail -30 "$dir/build.log" >&2; die "$version: go build failed (log: $dir/build.log)"; }
  mv -f "$bin.tmp" "$bin"
  printf '%s' "$ldflags" > "$bin.ldflags"
  end="$(date +%s)"
  binary_ok "$bin" "$version" || die "$version: built $bin but '--version' says '$("$bin" --version 2>&1 || true)'"
  log "$version: built in $((end - start))s: $bin"
  echo "$bin"
}

if [ "$WANT_ETCD" -eq 1 ]; then
  ensure_etcd
fi
for v in "${VERSIONS[@]}"; do
  build_one "$v"
done
