#!/usr/bin/env bash
# Build Hightide's base image locally: no image registry is reachable here, so nothing is pulled.
# A Debian bookworm root filesystem made by `debootstrap --variant=minbase` (from Debian's own mirror),
# with the system Python 3.11 the lockfile targets, imported with `docker import` as hightide-base:<tag>.
# Usage: infra/base/build-base.sh [TAG]   (needs root, debootstrap and a Docker engine)
set -euo pipefail

TAG="${1:-bookworm-1}"
IMAGE="hightide-base:${TAG}"
SUITE="bookworm"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
# Python 3.11 (bookworm's python3) is what uv.lock and requires-python ask for; ca-certificates for HTTPS.
PACKAGES="python3,python3-venv,ca-certificates,tini"

if docker image inspect "$IMAGE" >/dev/null 2>&1; then
  echo "build-base: $IMAGE already exists"
  exit 0
fi
command -v debootstrap >/dev/null || { echo "build-base: debootstrap is missing (apt-get install debootstrap)" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "build-base: debootstrap needs root" >&2; exit 2; }

ROOT="$(mktemp -d /tmp/hightide-base.XXXXXX)"
trap 'rm -rf "$ROOT"' EXIT
debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$ROOT" "$MIRROR"
# Trim what a container never uses: apt lists and caches, docs, man pages.
chroot "$ROOT" apt-get clean
rm -rf "$ROOT"/var/lib/apt/lists/* "$ROOT"/usr/share/doc/* "$ROOT"/usr/share/man/* "$ROOT"/usr/share/info/*
# The host's CA bundle, so that a build stage reaches PyPI through whatever TLS the host trusts.
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
  cp /etc/ssl/certs/ca-certificates.crt "$ROOT"/etc/ssl/certs/ca-certificates.crt
fi
tar -C "$ROOT" -c . | docker import \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["/bin/bash"]' \
  - "$IMAGE"
echo "build-base: built $IMAGE"
