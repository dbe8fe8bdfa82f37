"""The envelope secret store and the secrets contract, without I/O."""

from __future__ import annotations

import base64
import json
import os
import pickle
import uuid

import pytest
from tests.secret_leak_guard import LeakGuard

from deskpool.cli import main
from deskpool.config import REDACTED, parse_master_key
from deskpool.errors import ConfigError, ServiceUnavailable, StartupError
from deskpool.host import bootstrap
from deskpool.secret_rotation import KeyUsage
from deskpool.secrets import (
    MAX_PLAINTEXT_BYTES,
    SecretContext,
    SecretDecryptionFailed,
    SecretKeyUnknown,
    SecretsUnavailable,
    SecretTooLarge,
    SecretValue,
)
from deskpool_envelope import startup_problem
from deskpool_envelope.store import (
    _DATA_AT,
    _WRAP_AT,
    HEADER_BYTES,
    MAGIC,
    NONCE_BYTES,
    EnvelopeSecretStore,
    MasterKey,
)

CLUSTER = SecretContext("cluster.credentials", "4f7c2a9e-0000-4000-8000-000000000001", "api_token")
KEY_A = os.urandom(32)
KEY_B = os.urandom(32)


@pytest.fixture
def plaintext(leak_guard: LeakGuard) -> bytes:
    return leak_guard.plaintext("cluster-token").encode()


def test_round_trip_and_the_sealed_form_records_version_and_key_id(plaintext: bytes) -> None:
    store = EnvelopeSecretStore(KEY_A)
    sealed = store.encrypt(plaintext, CLUSTER)
    assert store.decrypt(sealed, CLUSTER) == plaintext
    assert sealed.startswith(MAGIC + b"\x01")
    assert store.key_id_of(sealed) == store.current_key_id == MasterKey(KEY_A).key_id
    assert len(store.current_key_id or "") == 16
    assert plaintext not in sealed
    assert KEY_A not in sealed
    # A fresh data key and nonces every time: sealing twice never gives the same bytes.
    again = store.encrypt(plaintext, CLUSTER)
    assert again != sealed
    assert again[_WRAP_AT : _WRAP_AT + NONCE_BYTES] != sealed[_WRAP_AT : _WRAP_AT + NONCE_BYTES]
    assert again[_DATA_AT : _DATA_AT + NONCE_BYTES] != sealed[_DATA_AT : _DATA_AT + NONCE_BYTES]


def test_empty_and_largest_plaintexts_round_trip_and_larger_is_refused() -> None:
    store = EnvelopeSecretStore(KEY_A)
    for value in (b"", b"x" * MAX_PLAINTEXT_BYTES):
        assert store.decrypt(store.encrypt(value, CLUSTER), CLUSTER) == value
    with pytest.raises(SecretTooLarge):
        store.encrypt(b"x" * (MAX_PLAINTEXT_BYTES + 1), CLUSTER)


def test_flipping_any_byte_of_the_sealed_value_fails_cleanly(plaintext: bytes) -> None:
    store = EnvelopeSecretStore(KEY_A, KEY_B)
    rotating = EnvelopeSecretStore(KEY_B, KEY_A)
    sealed = store.encrypt(plaintext, CLUSTER)
    regions = {
        "magic": range(0, len(MAGIC)),
        "version": range(len(MAGIC), len(MAGIC) + 1),
        "key id": range(len(MAGIC) + 1, HEADER_BYTES),
        "wrap nonce": range(_WRAP_AT, _WRAP_AT + NONCE_BYTES),
        "wrapped key": range(_WRAP_AT + NONCE_BYTES, _DATA_AT),
        "data nonce": range(_DATA_AT, _DATA_AT + NONCE_BYTES),
        "ciphertext and tag": range(_DATA_AT + NONCE_BYTES, len(sealed)),
    }
    assert sum(len(r) for r in regions.values()) == len(sealed)
    for region, positions in regions.items():
        for position in positions:
            damaged = bytearray(sealed)
            damaged[position] ^= 0x01
            with pytest.raises(SecretDecryptionFailed) as caught:
                store.decrypt(bytes(damaged), CLUSTER)
            assert plaintext.decode() not in str(caught.value), region
            with pytest.raises(SecretDecryptionFailed):
                rotating.rewrap(bytes(damaged), CLUSTER)


@pytest.mark.parametrize("cut", [0, 1, HEADER_BYTES, _DATA_AT + NONCE_BYTES + 15])
def test_truncated_or_foreign_values_fail_cleanly(cut: int, plaintext: bytes) -> None:
    store = EnvelopeSecretStore(KEY_A)
    sealed = store.encrypt(plaintext, CLUSTER)
    with pytest.raises(SecretDecryptionFailed):
        store.decrypt(sealed[:cut], CLUSTER)
    with pytest.raises(SecretDecryptionFailed):
        store.key_id_of(sealed[:cut])
    with pytest.raises(SecretDecryptionFailed):
        store.decrypt(b"not sealed at all" * 10, CLUSTER)


@pytest.mark.parametrize(
    "other",
    [
        SecretContext("cluster.credentials", CLUSTER.owner_id, "password"),
        SecretContext("cluster.credentials", "4f7c2a9e-0000-4000-8000-000000000002", "api_token"),
        SecretContext("pool.domain_join", CLUSTER.owner_id, "api_token"),
    ],
    ids=["other field", "other row", "other kind"],
)
def test_a_value_copied_to_another_row_field_or_kind_does_not_open(
    other: SecretContext, plaintext: bytes
) -> None:
    store = EnvelopeSecretStore(KEY_A)
    sealed = store.encrypt(plaintext, CLUSTER)
    with pytest.raises(SecretDecryptionFailed) as caught:
        store.decrypt(sealed, other)
    assert caught.value.context == other
    assert caught.value.status == 500
    with pytest.raises(SecretDecryptionFailed):
        EnvelopeSecretStore(KEY_B, KEY_A).rewrap(sealed, other)


def test_the_associated_data_is_canonical_and_unambiguous() -> None:
    contexts = [
        SecretContext("a", "bc", "d"),
        SecretContext("a", "b", "cd"),
        SecretContext("a.b", "c", "d"),
        SecretContext("a", "b.c", "d"),
    ]
    rendered = {context.associated_data() for context in contexts}
    assert len(rendered) == len(contexts)
    owner = uuid.UUID("4f7c2a9e-0000-4000-8000-000000000001")
    assert SecretContext.of("cluster.credentials", owner, "api_token") == CLUSTER
    assert str(CLUSTER) == f"cluster.credentials[{owner}].api_token"


@pytest.mark.parametrize(
    ("kind", "owner", "field"),
    [("", "x", "f"), ("Cluster", "x", "f"), ("a..b", "x", "f"), ("a", "", "f"), ("a", "x\n", "f")],
)
def test_contexts_are_validated(kind: str, owner: str, field: str) -> None:
    with pytest.raises(ValueError, match="secret context"):
        SecretContext(kind, owner, field)


def test_a_wrong_key_or_no_key_fails_cleanly(plaintext: bytes) -> None:
    sealed = EnvelopeSecretStore(KEY_A).encrypt(plaintext, CLUSTER)
    with pytest.raises(SecretKeyUnknown) as unknown:
        EnvelopeSecretStore(KEY_B).decrypt(sealed, CLUSTER)
    assert unknown.value.key_id == MasterKey(KEY_A).key_id
    assert unknown.value.code == "secret_key_unknown"
    assert "SECRETS_MASTER_KEY" in unknown.value.detail
    with pytest.raises(SecretsUnavailable):
        EnvelopeSecretStore().decrypt(sealed, CLUSTER)
    with pytest.raises(SecretsUnavailable) as missing:
        EnvelopeSecretStore().encrypt(plaintext, CLUSTER)
    assert isinstance(missing.value, ServiceUnavailable)
    assert (missing.value.status, missing.value.code) == (503, "secrets_key_missing")
    assert "SECRETS_MASTER_KEY" in missing.value.detail
    assert "generate-key" in missing.value.detail


def test_a_forged_key_id_does_not_make_another_key_open_it(plaintext: bytes) -> None:
    store = EnvelopeSecretStore(KEY_B, KEY_A)
    sealed = bytearray(EnvelopeSecretStore(KEY_A).encrypt(plaintext, CLUSTER))
    sealed[len(MAGIC) + 1 : HEADER_BYTES] = MasterKey(KEY_B).raw_id
    with pytest.raises(SecretDecryptionFailed):
        store.decrypt(bytes(sealed), CLUSTER)


def test_rotation_rewraps_the_data_key_and_keeps_the_ciphertext(plaintext: bytes) -> None:
    old = EnvelopeSecretStore(KEY_A)
    sealed = old.encrypt(plaintext, CLUSTER)
    rotating = EnvelopeSecretStore(KEY_B, KEY_A)
    assert rotating.key_ids == (MasterKey(KEY_B).key_id, MasterKey(KEY_A).key_id)
    assert rotating.previous_key_ids == (MasterKey(KEY_A).key_id,)
    assert rotating.decrypt(sealed, CLUSTER) == plaintext
    rewrapped = rotating.rewrap(sealed, CLUSTER)
    assert rotating.key_id_of(rewrapped) == MasterKey(KEY_B).key_id
    assert rewrapped[_DATA_AT:] == sealed[_DATA_AT:]
    assert rotating.rewrap(rewrapped, CLUSTER) == rewrapped
    assert EnvelopeSecretStore(KEY_B).decrypt(rewrapped, CLUSTER) == plaintext
    with pytest.raises(SecretKeyUnknown):
        EnvelopeSecretStore(KEY_A).decrypt(rewrapped, CLUSTER)
    with pytest.raises(SecretsUnavailable):
        EnvelopeSecretStore().rewrap(sealed, CLUSTER)


def test_the_same_key_as_current_and_previous_counts_once() -> None:
    store = EnvelopeSecretStore(KEY_A, KEY_A)
    assert store.key_ids == (MasterKey(KEY_A).key_id,)
    assert store.previous_key_ids == ()


def test_nothing_shows_a_key_or_a_plaintext(plaintext: bytes) -> None:
    store = EnvelopeSecretStore(KEY_A, KEY_B)
    shown = repr(store) + repr(MasterKey(KEY_A)) + str(store.key_ids)
    for key in (KEY_A, KEY_B):
        assert base64.b64encode(key).decode() not in shown
        assert key.hex() not in shown
    assert "current_key_id=" in repr(store)
    value = SecretValue(plaintext.decode())
    assert plaintext.decode() not in repr(value) + str(value) + f"{value}" + f"{value!r}"
    assert str(value) == REDACTED
    assert value.reveal() == plaintext.decode()
    assert value == SecretValue(plaintext.decode())
    assert value != SecretValue("other")
    with pytest.raises(TypeError):
        json.dumps({"token": value})
    with pytest.raises(TypeError):
        pickle.dumps(value)
    with pytest.raises(TypeError):
        hash(value)
    with pytest.raises(AttributeError):
        value._value = "changed"


def test_generate_key_prints_a_valid_new_key(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["secrets", "generate-key"]) == 0
    assert main(["secrets", "generate-key"]) == 0
    first, second = capsys.readouterr().out.split()
    assert len(parse_master_key(first)) == 32
    assert first != second


def _environ(**extra: str) -> dict[str, str]:
    return {
        "DATABASE_URL": "postgresql://127.0.0.1:5432/unused",
        "KVSTORE_ADDR": "127.0.0.1:6379",
        **extra,
    }


def test_an_invalid_key_is_a_config_error_naming_the_variable_not_the_value() -> None:
    bad = base64.b64encode(os.urandom(16)).decode()
    with pytest.raises(ConfigError) as caught:
        bootstrap(
            _environ(SECRETS_MASTER_KEY=bad, SECRETS_MASTER_KEY_PREVIOUS="%%%"),
            ["api"],
            log_setup=False,
        )
    message = str(caught.value)
    assert "SECRETS_MASTER_KEY:" in message
    assert "SECRETS_MASTER_KEY_PREVIOUS:" in message
    assert bad not in message
    assert "%%%" not in message


def test_a_previous_key_without_a_current_one_is_refused() -> None:
    previous = base64.b64encode(KEY_A).decode()
    with pytest.raises(StartupError) as caught:
        bootstrap(_environ(SECRETS_MASTER_KEY_PREVIOUS=previous), ["api"], log_setup=False)
    assert "SECRETS_MASTER_KEY_PREVIOUS is set but SECRETS_MASTER_KEY is not" in str(caught.value)
    assert previous not in str(caught.value)


def test_the_store_is_built_from_the_configuration() -> None:
    from deskpool.secrets import build_secret_store

    environ = _environ(
        SECRETS_MASTER_KEY=base64.urlsafe_b64encode(KEY_B).decode().rstrip("="),
        SECRETS_MASTER_KEY_PREVIOUS=base64.b64encode(KEY_A).decode(),
    )
    process = bootstrap(environ, ["api"], log_setup=False)
    store = build_secret_store(process.plugins, process.config)
    assert isinstance(store, EnvelopeSecretStore)
    assert store.key_ids == (MasterKey(KEY_B).key_id, MasterKey(KEY_A).key_id)


def _usage(counts: dict[str, int], current: bytes = b"", previous: bytes = b"") -> KeyUsage:
    return KeyUsage.of(counts, EnvelopeSecretStore(current, previous))


def test_startup_rules() -> None:
    a, b, c = (MasterKey(k).key_id for k in (KEY_A, KEY_B, os.urandom(32)))
    # Nothing sealed: every process starts, with or without keys.
    assert startup_problem(_usage({}), {"api", "worker"}) is None
    # Sealed values and no key: the api and worker refuse; the web does not need one.
    problem = startup_problem(_usage({a: 3}), {"api", "worker"})
    assert problem is not None
    assert "SECRETS_MASTER_KEY is not set" in problem
    assert "api and worker refuse" in problem
    assert a in problem
    assert startup_problem(_usage({a: 3}), {"web"}) is None
    # Values under a key neither configured key matches: every process refuses.
    for components in ({"api"}, {"web"}, {"gateway"}, set()):
        problem = startup_problem(_usage({a: 2, c: 1}, KEY_A), components)
        assert problem is not None
        assert f"{c} (1 value)" in problem
        assert f"SECRETS_MASTER_KEY has key id {a}" in problem
    # A rotation window: both keys match.
    assert startup_problem(_usage({a: 2, b: 5}, KEY_B, KEY_A), {"api"}) is None
    usage = _usage({a: 2, b: 5, c: 1}, KEY_B, KEY_A)
    assert (usage.total, usage.under_current, usage.under_previous) == (8, 5, 2)
    assert usage.unknown == {c: 1}
    assert [usage.role(k) for k in (a, b, c)] == ["previous", "current", "unknown"]
