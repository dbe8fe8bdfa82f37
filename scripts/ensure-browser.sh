#!/usr/bin/env bash
# Makes sure Debian's Chromium is at /usr/bin/chromium for the browser tests (/docs, the console).
# Uses it when it is there; otherwise, as root on Debian/Ubuntu, installs the `chromium` package;
# otherwise stops with a message that says exactly what to install. Playwright drives this
# browser (never a browser build of its own, which would be downloaded from outside).
set -euo pipefail

CHROMIUM=/usr/bin/chromium

if [ -x "$CHROMIUM" ]; then
  exit 0
fi

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  if [ ! -f /var/lib/apt/.deskpool-updated ]; then
    apt-get update -qq && touch /var/lib/apt/.deskpool-updated
  fi
  apt-get install -y -qq chromium >/dev/null
  if [ -x "$CHROMIUM" ]; then
    echo "ensure-browser: installed $("$CHROMIUM" --version 2>/dev/null | head -n 1)"
    exit 0
  fi
  echo "ensure-browser: the chromium package installed no $CHROMIUM" >&2
  exit 1
fi

echo "ensure-browser: $CHROMIUM is missing; install Debian's browser: sudo apt-get install chromium" >&2
exit 1
