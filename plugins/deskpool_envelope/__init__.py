"""The ``envelope`` secret store: AES-256-GCM envelope encryption under ``SECRETS_MASTER_KEY``.

Registered in ``deskpool.secret_stores`` and chosen by ``SECRET_STORE=envelope`` (the
default). :mod:`deskpool_envelope.store` seals and opens values; this module registers the
store and enforces the startup rules of SPEC.md §7 that concern the keys:

- ``SECRETS_MASTER_KEY_PREVIOUS`` without ``SECRETS_MASTER_KEY`` is a configuration error;
- the api and worker refuse to start without ``SECRETS_MASTER_KEY`` once any sealed value
  exists (the gateway refuses without it in any case: see ``deskpool_gateway``);
- every process refuses to start while sealed values exist under a key id that neither
  configured key matches, naming the key ids (never the keys).
"""

from __future__ import annotations

import logging

from deskpool.config import Config
from deskpool.errors import StartupError
from deskpool.plugins import hookimpl
from deskpool.registry import Registry
from deskpool.runtime import Runtime
from deskpool.secret_rotation import KeyUsage, count_by_key_id
from deskpool.secrets import SecretStore, SecretStoreFactory
from deskpool_envelope.store import EnvelopeSecretStore

log = logging.getLogger(__name__)

#: Components that read and write credentials, and so need the current key once any exist.
COMPONENTS_NEEDING_THE_KEY = ("api", "worker")


@hookimpl
def deskpool_register_secret_stores(registry: Registry[SecretStoreFactory]) -> None:
    """Register the ``envelope`` store; its factory takes the configuration."""
    registry.add("envelope", EnvelopeSecretStore.from_config)


@hookimpl
def deskpool_configure(config: Config) -> None:
    """Refuse a previous key without a current one; note a previous key equal to the current."""
    current = config.typed("SECRETS_MASTER_KEY", bytes)
    previous = config.typed("SECRETS_MASTER_KEY_PREVIOUS", bytes)
    if previous and not current:
        raise StartupError(
            "SECRETS_MASTER_KEY_PREVIOUS is set but SECRETS_MASTER_KEY is not: during a key "
            "rotation the new key is SECRETS_MASTER_KEY and the retiring one "
            "SECRETS_MASTER_KEY_PREVIOUS (see docs/operators/secrets.md)"
        )
    if previous and previous == current:
        log.warning("SECRETS_MASTER_KEY_PREVIOUS is the same key as SECRETS_MASTER_KEY")


def _describe_keys(usage: KeyUsage) -> str:
    current = usage.current_key_id or "unset"
    previous = ", ".join(usage.previous_key_ids) or "unset"
    return f"SECRETS_MASTER_KEY has key id {current}; SECRETS_MASTER_KEY_PREVIOUS has {previous}"


def _describe_counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{key_id} ({n} value{'s' if n != 1 else ''})" for key_id, n in counts.items())


def startup_problem(usage: KeyUsage, components: set[str]) -> str | None:
    """Why a process running ``components`` must not start with these keys, or ``None``."""
    if usage.total == 0:
        return None
    if usage.current_key_id is None:
        needing = sorted(components.intersection(COMPONENTS_NEEDING_THE_KEY))
        if not needing:
            return None
        verb = "refuses" if len(needing) == 1 else "refuse"
        return (
            f"SECRETS_MASTER_KEY is not set, but the database holds {usage.total} sealed "
            f"secret(s) under key id(s) {_describe_counts(dict(usage.counts))}; "
            f"the {' and '.join(needing)} {verb} to start without it. Set SECRETS_MASTER_KEY "
            f"to the master key they were sealed with"
        )
    unknown = usage.unknown
    if unknown:
        return (
            f"{sum(unknown.values())} sealed secret(s) are under master key id(s) "
            f"{_describe_counts(unknown)} that neither configured key matches "
            f"({_describe_keys(usage)}). Configure the key they were sealed with (as "
            f"SECRETS_MASTER_KEY_PREVIOUS during a rotation), then run `deskpool secrets rewrap`; "
            f"`deskpool secrets status` shows the key ids"
        )
    return None


async def check_keys(runtime: Runtime, store: SecretStore) -> None:
    """Apply the startup rules to the values in the database.

    :raises StartupError: naming the variables and the key ids, never a key.
    """
    async with runtime.db.acquire() as connection:
        if not await connection.fetchval("SELECT to_regclass('sealed_secrets') IS NOT NULL"):
            return  # not migrated yet: nothing can be sealed
        counts = await count_by_key_id(connection)
    usage = KeyUsage.of(counts, store)
    components = {name for group, name in runtime.plugins.loaded if group == "components"}
    problem = startup_problem(usage, components)
    if problem:
        raise StartupError(problem)
    if usage.under_previous:
        log.warning(
            "%d sealed secret(s) are still under the previous master key; run "
            "`deskpool secrets rewrap`, then remove SECRETS_MASTER_KEY_PREVIOUS",
            usage.under_previous,
            extra={"previous_key_ids": ",".join(usage.previous_key_ids)},
        )


@hookimpl
async def deskpool_startup(runtime: Runtime) -> None:
    """Refuse to start when the configured keys cannot open what is stored (SPEC.md §7)."""
    await check_keys(runtime, runtime.secret_store)
