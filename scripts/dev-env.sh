#!/usr/bin/env bash
# Writes .run/dev.env (once) with the development settings of `make run`, including a freshly
# generated SECRETS_MASTER_KEY, and makes sure the development database exists.
set -euo pipefail
mkdir -p .run
if [ ! -f .run/dev.env ]; then
  key=$(.venv/bin/python -c 'import base64, os; print(base64.b64encode(os.urandom(32)).decode())')
  cat > .run/dev.env <<ENV
# Development settings written by scripts/dev-env.sh; edit freely (it is not committed).
DATABASE_URL=${DATABASE_URL:-postgresql://postgres@127.0.0.1:5432/deskpool}
KVSTORE_ADDR=${KVSTORE_ADDR:-127.0.0.1:6379}
SECRETS_MASTER_KEY=$key
APP_ENV=development
API_ADDR=127.0.0.1:8080
GATEWAY_ADDR=127.0.0.1:8081
METRICS_ADDR=127.0.0.1:9090
ENV
  chmod 600 .run/dev.env
  echo "dev-env: wrote .run/dev.env"
fi
# shellcheck source=scripts/dev-env-load.sh
. scripts/dev-env-load.sh .run/dev.env
.venv/bin/python - <<'PY'
import asyncio, os
from urllib.parse import urlsplit, urlunsplit
import asyncpg

async def main() -> None:
    url = os.environ["DATABASE_URL"]
    parts = urlsplit(url)
    name = parts.path.lstrip("/") or "deskpool"
    admin = urlunsplit(parts._replace(path="/postgres"))
    connection = await asyncpg.connect(admin)
    try:
        if not await connection.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name):
            await connection.execute(f'CREATE DATABASE "{name}"')
            print(f"dev-env: created database {name}")
    finally:
        await connection.close()

asyncio.run(main())
PY
