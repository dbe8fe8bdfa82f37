#!/usr/bin/env bash
# Makes sure podman, buildah, runc and debootstrap are installed (Debian/Ubuntu, as root), for
# `make test-deploy`. podman runs with deploy/podman/containers.conf (CONTAINERS_CONF): runc and
# lowered ulimits, which is what works in sandboxes like this project's CI.
set -euo pipefail
missing=()
for tool in podman buildah runc debootstrap; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "ensure-podman: missing ${missing[*]}; install them: sudo apt-get install podman buildah runc debootstrap uidmap" >&2
  exit 1
fi
echo "ensure-podman: installing ${missing[*]}"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman buildah runc debootstrap uidmap >/dev/null
