#!/usr/bin/env bash
# Makes sure rsyslogd is installed: the syslog export's tests start their own (deskpool.testing
# .rsyslog: a TCP input on a free port, an output file in the test's folder, in the foreground
# with its own pid file); nothing runs as a service. Uses it when it is there; otherwise, as root
# on Debian/Ubuntu, installs Debian's rsyslog package without starting it; otherwise stops with
# a message that says exactly what to install.
set -euo pipefail

if command -v rsyslogd >/dev/null 2>&1 || [ -x /usr/sbin/rsyslogd ]; then
  exit 0
fi

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  if [ ! -f /var/lib/apt/.deskpool-updated ]; then
    apt-get update -qq && touch /var/lib/apt/.deskpool-updated
  fi
  # The package's own service is not started (no init system runs here; policy-rc.d refuses it
  # where one does): the tests run rsyslogd themselves.
  policy=/usr/sbin/policy-rc.d
  made_policy=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && made_policy=1
  fi
  apt-get install -y -qq --no-install-recommends rsyslog >/dev/null
  [ "$made_policy" = 1 ] && rm -f "$policy"
  echo "ensure-rsyslog: installed rsyslog"
  exit 0
fi

echo "ensure-rsyslog: rsyslogd is missing; install it: sudo apt-get install rsyslog" >&2
exit 1
