# The peertrail image (ghcr.io/peertrail/peertrail, as deploy/base/kustomization.yaml names it):
#
#   docker build -t ghcr.io/peertrail/peertrail:v0.1.0 .
#
# linux/amd64 only: the embedded store's engine, libchdb.so, is published for linux x86_64 only
# (npm package @chdb/lib-linux-x64-gnu). What the image holds, and what deploy/base relies on:
#
#   /usr/local/bin/peertrail     the entrypoint; the Deployment's args start with `serve`
#   /usr/local/lib/libchdb.so    the pinned chDB, fetched by scripts/fetch-chdb.sh (version and
#                                SHA-256 pinned there); CHDB_LIB_PATH names it, as the
#                                Deployment's env does
#   /var/lib/peertrail           the data directory (--data-dir), owned by 65532; the Deployment
#                                mounts its PersistentVolumeClaim here
#   user 65532:65532             non-root, the Deployment's runAsUser/runAsGroup
#
# Built and run by test/image/run.sh (part of test/run) with podman, on local stand-ins for the
# FROM images made from Debian packages (no registry is reachable from CI): as user 65532 on a
# read-only root filesystem, it takes a captured audit body and answers its chain.

# --- libchdb.so: downloaded and verified exactly as on a developer machine ---
FROM --platform=linux/amd64 node:22-bookworm-slim AS chdb
# fetch-chdb.sh verifies the exported symbols with nm (binutils); npm, tar and sha256sum are there.
RUN apt-get update \
 && apt-get install -y --no-install-recommends binutils \
 && rm -rf /var/lib/apt/lists/*
COPY scripts/fetch-chdb.sh /usr/local/bin/fetch-chdb.sh
RUN lib="$(PEERTRAIL_CACHE=/cache bash /usr/local/bin/fetch-chdb.sh)" \
 && mv "$lib" /libchdb.so \
 && rm -rf /cache

# --- peertrail ---
# Debian bookworm, like the runtime image below: the binary links the same glibc.
FROM --platform=linux/amd64 golang:1.26.10-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# libchdb is loaded at run time with purego (no cgo in this module); CGO_ENABLED=1 is the
# toolchain's default and what every test of the embedded store runs with, so the binary uses
# the C runtime's thread setup, which a dlopened C++ library expects.
# VERSION is what `peertrail version` and the metric peertrail_build_info say (the build context
# has no .git for the revision): a release passes its tag, --build-arg VERSION=v0.1.0.
ARG VERSION=devel
# The build cache persists between builds (BuildKit and podman/buildah alike), so a rebuild after a
# change compiles only what changed.
RUN --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=1 go build -trimpath \
      -ldflags="-s -w -X github.com/peertrail/peertrail/internal/version.Version=${VERSION}" \
      -o /out/peertrail ./cmd/peertrail \
 && mkdir -p /out/data

# --- runtime: glibc (libchdb needs libc, libm, libpthread, libdl, librt), CA certificates, no shell ---
FROM --platform=linux/amd64 gcr.io/distroless/base-debian12:nonroot
COPY --from=chdb /libchdb.so /usr/local/lib/libchdb.so
COPY --from=build /out/peertrail /usr/local/bin/peertrail
COPY --from=build --chown=65532:65532 /out/data /var/lib/peertrail
ENV CHDB_LIB_PATH=/usr/local/lib/libchdb.so
USER 65532:65532
EXPOSE 8443
ENTRYPOINT ["/usr/local/bin/peertrail"]
