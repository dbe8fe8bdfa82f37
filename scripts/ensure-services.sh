#!/usr/bin/env bash
# Makes sure PostgreSQL and Redis answer at the configured (or default) addresses.
# Uses running servers when they answer; otherwise, as root on Debian/Ubuntu, installs and starts
# them; otherwise stops with a message that says exactly what to install.
set -euo pipefail

PG_HOST=${PGHOST_CHECK:-127.0.0.1}
PG_PORT=${PGPORT_CHECK:-5432}
KV=${KVSTORE_ADDR:-${REDIS_ADDR:-127.0.0.1:6379}}
KV_HOST=${KV%:*}
KV_PORT=${KV##*:}

answers() { # host port
  (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null
}

wait_for() { # host port name
  for _ in $(seq 1 60); do
    answers "$1" "$2" && return 0
    sleep 0.5
  done
  echo "ensure-services: $3 did not start listening on $1:$2" >&2
  return 1
}

can_install() {
  [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1
}

apt_install() {
  export DEBIAN_FRONTEND=noninteractive
  if [ ! -f /var/lib/apt/.deskpool-updated ]; then
    apt-get update -qq && touch /var/lib/apt/.deskpool-updated
  fi
  apt-get install -y -qq "$@" >/dev/null
}

if ! answers "$PG_HOST" "$PG_PORT"; then
  if ! command -v pg_ctlcluster >/dev/null 2>&1; then
    if can_install; then
      echo "ensure-services: installing PostgreSQL"
      apt_install postgresql
    else
      echo "ensure-services: PostgreSQL is not reachable at $PG_HOST:$PG_PORT." >&2
      echo "Install it (sudo apt-get install postgresql) and start it, or set DATABASE_URL." >&2
      exit 1
    fi
  fi
  version=$(ls /etc/postgresql | sort -V | tail -n 1)
  conf=/etc/postgresql/$version/main
  # Local trust authentication on loopback, as development and CI expect.
  if [ -w "$conf/pg_hba.conf" ] && ! grep -q "deskpool-dev" "$conf/pg_hba.conf"; then
    sed -i '1i host all all 127.0.0.1/32 trust # deskpool-dev\nhost all all ::1/128 trust # deskpool-dev\nlocal all all trust # deskpool-dev' "$conf/pg_hba.conf"
  fi
  echo "ensure-services: starting PostgreSQL $version"
  pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
  wait_for "$PG_HOST" "$PG_PORT" PostgreSQL
fi

if ! answers "$KV_HOST" "$KV_PORT"; then
  if ! command -v redis-server >/dev/null 2>&1; then
    if can_install; then
      echo "ensure-services: installing Redis"
      apt_install redis-server
    else
      echo "ensure-services: Redis is not reachable at $KV_HOST:$KV_PORT." >&2
      echo "Install it (sudo apt-get install redis-server) and start it, or set KVSTORE_ADDR." >&2
      exit 1
    fi
  fi
  echo "ensure-services: starting Redis"
  mkdir -p /var/lib/redis /var/log/redis 2>/dev/null || true
  redis-server --daemonize yes --bind 127.0.0.1 --port "$KV_PORT" --save "" --appendonly no \
    --dir /tmp --logfile /tmp/deskpool-redis.log
  wait_for "$KV_HOST" "$KV_PORT" Redis
fi
echo "ensure-services: PostgreSQL ($PG_HOST:$PG_PORT) and Redis ($KV_HOST:$KV_PORT) answer"
