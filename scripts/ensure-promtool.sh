#!/usr/bin/env bash
# Makes sure promtool is installed: `make test` checks and unit-tests the shipped Prometheus
# alerting rules with it (deploy/prometheus, tests/integration/ops/test_alert_rules.py). It comes
# with Debian's `prometheus` package; nothing of it runs as a service here (the package's own
# service is not started: no init system runs one).
# Uses it when it is there; otherwise, as root on Debian/Ubuntu, installs the package; otherwise
# stops with a message that says exactly what to install.
set -euo pipefail

command -v promtool >/dev/null 2>&1 && exit 0

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  if [ ! -f /var/lib/apt/.deskpool-updated ]; then
    apt-get -o DPkg::Lock::Timeout=600 update -qq && touch /var/lib/apt/.deskpool-updated
  fi
  # policy-rc.d answering 101: the package's maintainer scripts start no Prometheus server.
  policy=/usr/sbin/policy-rc.d
  created=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && created=1
  fi
  apt-get install -o DPkg::Lock::Timeout=600 -y -qq --no-install-recommends prometheus >/dev/null
  [ "$created" = 1 ] && rm -f "$policy"
  echo "ensure-promtool: installed prometheus (for promtool)"
  exit 0
fi

echo "ensure-promtool: promtool is missing; install it: sudo apt-get install prometheus" >&2
exit 1
