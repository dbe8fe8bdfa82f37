#!/usr/bin/env bash
# Builds a Debian 12 base image from scratch with debootstrap and imports it into podman as
# localhost/deskpool-base:bookworm, for machines that reach Debian's packages but no container
# registry. Uses the first Debian mirror configured for apt on this machine.
set -euo pipefail
image=${1:-localhost/deskpool-base:bookworm}
export CONTAINERS_CONF=${CONTAINERS_CONF:-$(cd "$(dirname "$0")/.." && pwd)/podman/containers.conf}
if podman image exists "$image"; then
  echo "local-base-image: $image exists"
  exit 0
fi
mirror=$(cat /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null \
  | grep -E '^(URIs:|deb )' | grep -v security | head -1 | awk '{print $2}' || true)
if [ -z "$mirror" ]; then
  echo "local-base-image: no Debian mirror configured for apt on this machine" >&2
  exit 1
fi
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
echo "local-base-image: debootstrap bookworm (minbase) from the configured mirror"
debootstrap --variant=minbase --include=ca-certificates bookworm "$root" "$mirror" >/dev/null
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
tar -C "$root" -c . | podman import --change 'CMD ["/bin/bash"]' - "$image" >/dev/null
echo "local-base-image: imported $image"
