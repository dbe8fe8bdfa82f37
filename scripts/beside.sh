#!/usr/bin/env bash
# Runs a command line (the first argument) beside a command (the rest of the arguments), shows
# the first's output once both ended, and fails when either failed.
# `make test` runs the API contract this way (see the Makefile's CONTRACT).
# Usage: scripts/beside.sh 'COMMAND LINE' COMMAND [ARGUMENTS...]
set -uo pipefail
side="$1"
shift
log="$(mktemp)"
bash -c "$side" >"$log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null; rm -f "$log"' EXIT
echo "beside: $side (its output follows)"
"$@"
main=$?
wait "$pid"
beside=$?
echo "---- beside: $side"
cat "$log"
exit $((main != 0 ? main : beside))
