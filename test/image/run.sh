#!/usr/bin/env bash
# test/image/run.sh: build the container image from the repository's Dockerfile with podman and
# use it as a cluster would: as user 65532 with a read-only root filesystem, no capabilities, a
# writable data volume and /tmp, TLS with a serving certificate, an apiserver with a token of its
# own and a reader with another. It posts a captured audit body from real kube-apiservers
# (test/testdata/real/proxied-new-to-old) and reads the chain of one forwarded request back through
# the chain API, as `peertrail chain` does, expecting what the capture's labels say: proxied,
# entry kas-c, peer kas-a.
#
# No image registry is reachable from CI, so the Dockerfile's FROM images are stood in for by
# local images of the same names, made here from Debian packages:
#   debian            mmdebstrap --variant=minbase --include=ca-certificates bookworm, from
#                     deb.debian.org (the suite and the recipe are pinned here; the package versions
#                     it got are listed in <cache>/debian-bookworm.packages)
#   gcr.io/distroless/base-debian12:nonroot   that Debian (glibc, CA certificates)
#   golang:1.26.10-bookworm                   that Debian + gcc (cgo) + the Go toolchain go.mod names
#                                             and the module cache of go.mod (offline: GOPROXY=off)
#   node:22-bookworm-slim                     that Debian + the pinned libchdb.so in the cache
#                                             scripts/fetch-chdb.sh looks in, so the Dockerfile's
#                                             stage verifies it (ELF, symbol, SHA-256) instead of
#                                             downloading 566 MB; no npm
# Everything big (the Debian tarball, podman's storage with its layer cache) is kept under
# ${PEERTRAIL_CACHE:-$HOME/.cache/peertrail}/image, so a second run rebuilds only what changed.
#
# Needs root, podman, runc, mmdebstrap (Debian: apt-get install podman runc mmdebstrap; installed
# when missing), curl, openssl, and CHDB_LIB_PATH (scripts/fetch-chdb.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
root_dir="$PWD"

log() { printf 'test/image: %s\n' "$*" >&2; }
die() { log "FAIL: $*"; exit 1; }

[ "$(id -u)" -eq 0 ] || die "run as root (rootful podman; mmdebstrap)"
need=()
command -v podman >/dev/null 2>&1 || need+=(podman)
command -v runc >/dev/null 2>&1 || need+=(runc)
command -v mmdebstrap >/dev/null 2>&1 || need+=(mmdebstrap)
if [ "${#need[@]}" -gt 0 ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null; }
fi
lib="${CHDB_LIB_PATH:-$(scripts/fetch-chdb.sh)}"
chdb_version="$(sed -n 's/^CHDB_VERSION="\(.*\)"$/\1/p' scripts/fetch-chdb.sh)"
go_version="$(sed -n 's/^toolchain go//p' go.mod)"

cache="${PEERTRAIL_CACHE:-$HOME/.cache/peertrail}/image"
mkdir -p "$cache"
# Measured on Debian 12's podman 4.3: runc with cgroupfs, and no default ulimits (the default
# nofile limit is refused where the host's hard limit is lower).
export CONTAINERS_CONF="$cache/containers.conf"
printf '[containers]\ndefault_ulimits = []\n' >"$CONTAINERS_CONF"
podman=(podman --root "$cache/storage" --runroot "$cache/run" --runtime runc --cgroup-manager=cgroupfs)

# --- the Debian base, pinned by its recipe ---
suite=bookworm
mirror=http://deb.debian.org/debian
recipe="mmdebstrap --variant=minbase --include=ca-certificates $suite $mirror"
key="$(printf '%s' "$recipe" | sha256sum | cut -c1-12)"
tarball="$cache/debian-$suite-$key.tar"
if [ ! -f "$tarball" ]; then
  log "making the Debian base ($recipe)"
  # shellcheck disable=SC2086
  mmdebstrap --quiet --format=tar --variant=minbase --include=ca-certificates \
    --customize-hook='chroot "$1" dpkg-query -W -f="\${Package} \${Version}\n" > "$1/.packages"' \
    --customize-hook='copy-out /.packages '"$cache" --customize-hook='rm "$1/.packages"' \
    "$suite" "$tarball.tmp" "$mirror"
  mv "$cache/.packages" "$cache/debian-$suite.packages"
  mv "$tarball.tmp" "$tarball"
fi
base="localhost/peertrail-test/debian:$suite-$key"
if ! "${podman[@]}" image exists "$base"; then
  "${podman[@]}" import --quiet "$tarball" "$base" >/dev/null
fi

# --- the stand-ins for the Dockerfile's FROM images ---
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT

log "stand-in gcr.io/distroless/base-debian12:nonroot"
"${podman[@]}" tag "$base" gcr.io/distroless/base-debian12:nonroot

if ! "${podman[@]}" image exists "docker.io/library/node:22-bookworm-slim-chdb$chdb_version"; then
  log "stand-in node:22-bookworm-slim (with libchdb.so $chdb_version in fetch-chdb.sh's cache)"
  mkdir -p "$stage/node"
  ln "$lib" "$stage/node/libchdb.so" 2>/dev/null || cp "$lib" "$stage/node/libchdb.so"
  printf 'FROM %s\nCOPY libchdb.so /cache/chdb/%s/libchdb.so\n' "$base" "$chdb_version" >"$stage/node/Containerfile"
  "${podman[@]}" build --quiet -t "docker.io/library/node:22-bookworm-slim-chdb$chdb_version" "$stage/node" >/dev/null
fi
"${podman[@]}" tag "docker.io/library/node:22-bookworm-slim-chdb$chdb_version" docker.io/library/node:22-bookworm-slim

gotag="docker.io/library/golang:$go_version-bookworm"
modkey="$(cat go.sum | sha256sum | cut -c1-12)"
if ! "${podman[@]}" image exists "$gotag-mod$modkey"; then
  log "stand-in golang:$go_version-bookworm (gcc, Go $go_version, go.mod's module cache)"
  goroot="$(GOTOOLCHAIN="go$go_version" go env GOROOT)"
  [ -x "$goroot/bin/go" ] || die "no Go $go_version toolchain here (GOTOOLCHAIN=go$go_version go version fetches it)"
  mkdir -p "$stage/go"
  cp -a "$goroot" "$stage/go/goroot"
  GOFLAGS=-modcacherw GOMODCACHE="$stage/go/gomod" GOTOOLCHAIN="go$go_version" go mod download -x 2>/dev/null
  rm -rf "$stage/go/gomod/cache/vcs"
  cat >"$stage/go/Containerfile" <<EOC
FROM $base
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends gcc libc6-dev >/dev/null && rm -rf /var/lib/apt/lists/*
COPY goroot /usr/local/go
COPY gomod /go/pkg/mod
ENV PATH=/usr/local/go/bin:/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin GOPATH=/go GOTOOLCHAIN=local GOPROXY=off GOSUMDB=off
EOC
  "${podman[@]}" build --quiet -t "$gotag-mod$modkey" "$stage/go" >/dev/null
fi
"${podman[@]}" tag "$gotag-mod$modkey" "$gotag"

# --- the image, from the Dockerfile as it is ---
log "podman build (the Dockerfile)"
image=localhost/peertrail-test/peertrail:test
start=$SECONDS
"${podman[@]}" build --pull=never --layers --build-arg VERSION=image-test -t "$image" -f Dockerfile . >"$stage/build.log" 2>&1 ||
  { tail -40 "$stage/build.log" >&2; die "podman build failed"; }
log "built in $((SECONDS - start))s: $("${podman[@]}" image inspect --format '{{.Size}}' "$image") bytes"

# --- run it as the Deployment does ---
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
mkdir -p "$stage/etc/tls" "$stage/etc/readers" "$stage/etc/config" "$stage/data"
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=peertrail -addext "subjectAltName=IP:127.0.0.1" \
  -keyout "$stage/etc/tls/tls.key" -out "$stage/etc/tls/tls.crt" 2>/dev/null
head -c 24 /dev/urandom | base64 >"$stage/etc/readers/test-reader"
for a in kas-a kas-b kas-c; do head -c 24 /dev/urandom | base64 >"$stage/etc/config/$a.token"; done
cat >"$stage/etc/config/config.yaml" <<EOC
apiservers:
- {name: kas-a, tokenFile: /etc/peertrail/config/kas-a.token}
- {name: kas-b, tokenFile: /etc/peertrail/config/kas-b.token}
- {name: kas-c, tokenFile: /etc/peertrail/config/kas-c.token}
EOC
chmod -R a+rX "$stage/etc"
chown 65532:65532 "$stage/data"
name="peertrail-image-test-$$"
"${podman[@]}" run -d --name "$name" --network host --read-only --read-only-tmpfs=false \
  --tmpfs /tmp:rw,size=256m --user 65532:65532 --cap-drop ALL --security-opt no-new-privileges \
  -v "$stage/etc/config:/etc/peertrail/config:ro" -v "$stage/etc/tls:/etc/peertrail/tls:ro" \
  -v "$stage/etc/readers:/etc/peertrail/readers:ro" -v "$stage/data:/var/lib/peertrail" \
  "$image" serve --config=/etc/peertrail/config/config.yaml --listen="127.0.0.1:$port" \
  --sql-listen=127.0.0.1:0 --data-dir=/var/lib/peertrail --tls-cert-file=/etc/peertrail/tls/tls.crt \
  --tls-key-file=/etc/peertrail/tls/tls.key --reader-token-file=/etc/peertrail/readers --chain-window=2s \
  >/dev/null
trap '"${podman[@]}" logs "$name" >"$stage/serve.log" 2>&1 || true; "${podman[@]}" rm -f "$name" >/dev/null 2>&1 || true; rm -rf "$stage"' EXIT
url="https://127.0.0.1:$port"
curl_=(curl -sS --cacert "$stage/etc/tls/tls.crt" --max-time 10)
for _ in $(seq 1 120); do
  "${curl_[@]}" -o /dev/null "$url/readyz" 2>/dev/null && break
  "${podman[@]}" container exists "$name" && [ "$("${podman[@]}" inspect -f '{{.State.Running}}' "$name")" = true ] ||
    { "${podman[@]}" logs "$name" >&2 || true; die "serve exited"; }
  sleep 0.5
done
"${curl_[@]}" -f -o /dev/null "$url/readyz" || { "${podman[@]}" logs "$name" >&2; die "serve did not become ready"; }
log "serve is ready at $url as $("${podman[@]}" exec "$name" id -u 2>/dev/null || echo 65532) (read-only root)"

# The root filesystem is read-only: nothing but the volumes can be written.
if "${podman[@]}" exec "$name" /usr/local/bin/peertrail generate dashboards --out /usr/local/x >/dev/null 2>&1; then
  die "the container could write to its root filesystem"
fi

capture=test/testdata/real/proxied-new-to-old
python3 - "$capture/labels.json" >"$stage/posts" <<'EOP'
import json, sys
for p in json.load(open(sys.argv[1]))["posts"]:
    print(p["apiserver"], p["file"])
EOP
while read -r apiserver file; do
  code="$("${curl_[@]}" -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $(cat "$stage/etc/config/$apiserver.token")" \
    -H 'Content-Type: application/json' --data-binary "@$capture/$file" "$url/audit/$apiserver")"
  [ "$code" = 200 ] || die "POST $file as $apiserver: $code"
done <"$stage/posts"
log "posted $(wc -l <"$stage/posts") captured batches"

id=7388e61f-e731-4b5b-ae04-00e4a3660cfc
chain=""
for _ in $(seq 1 60); do
  chain="$("${curl_[@]}" -H "Authorization: Bearer $(cat "$stage/etc/readers/test-reader")" "$url/api/v1/chains/$id" || true)"
  if python3 -c 'import json,sys; c=json.loads(sys.argv[1]); sys.exit(0 if c.get("state")=="final" else 1)' "$chain" 2>/dev/null; then
    break
  fi
  sleep 1
done
python3 - "$chain" <<'EOP' || die "chain $id: $chain"
import json, sys
c = json.loads(sys.argv[1])
got = (c.get("class"), (c.get("entry") or {}).get("apiserver"), (c.get("peer") or {}).get("apiserver"))
want = ("proxied", "kas-c", "kas-a")
print("test/image: chain %s: class %s, entry %s, peer %s" % ((c.get("audit_id"),) + got), file=sys.stderr)
sys.exit(0 if got == want else 1)
EOP
# An apiserver's token cannot read.
code="$("${curl_[@]}" -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $(cat "$stage/etc/config/kas-a.token")" "$url/api/v1/chains/$id")"
[ "$code" = 403 ] || die "an apiserver's token read the chain API: $code"
log "ok: the image serves as user 65532 on a read-only root filesystem; the captured chain reads back"
