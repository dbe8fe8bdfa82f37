"""The watermark's MAC and history: edits, replays and resets are evidence; it never goes back."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from deskpool.licensing.model import WatermarkIntegrity
from deskpool.licensing.watermark import (
    Seen,
    StoredWatermark,
    WatermarkKeys,
    advance,
    cleared,
    inspect,
)

T0 = datetime(2027, 1, 1, tzinfo=UTC)
INSTANCE = "7f1d2a9c-0000-4000-8000-000000000001"
KEYS = WatermarkKeys.derive(b"k" * 32)
UNSET = StoredWatermark(None, 0)


def test_it_only_moves_forward_and_verifies() -> None:
    first, view = advance(UNSET, T0, KEYS, INSTANCE)
    assert view.integrity is WatermarkIntegrity.UNSET
    assert first.instant == T0
    assert first.seq == 1
    # A clock set back a year does not move it back.
    second, view = advance(first, T0 - timedelta(days=365), KEYS, INSTANCE)
    assert view.integrity is WatermarkIntegrity.INTACT
    assert second.instant == T0
    assert second.seq == 2
    assert inspect(second, KEYS, INSTANCE).integrity is WatermarkIntegrity.INTACT


def test_an_edited_row_is_tampered_and_the_evidence_survives_a_fix() -> None:
    row, _ = advance(UNSET, T0, KEYS, INSTANCE)
    edited = replace(row, instant=T0 - timedelta(days=30))
    assert inspect(edited, KEYS, INSTANCE).integrity is WatermarkIntegrity.TAMPERED
    following, view = advance(edited, T0 + timedelta(hours=1), KEYS, INSTANCE)
    assert view.integrity is WatermarkIntegrity.TAMPERED
    assert following.evidence == "tampered"
    again, view = advance(following, T0 + timedelta(hours=2), KEYS, INSTANCE)
    assert view.integrity is WatermarkIntegrity.TAMPERED
    assert again.evidence == "tampered"
    # Only a license issued after the evidence clears it (the service decides when).
    fresh = cleared(again, T0 + timedelta(hours=3), KEYS, INSTANCE)
    assert inspect(fresh, KEYS, INSTANCE).integrity is WatermarkIntegrity.INTACT


def test_a_replayed_or_reset_row_is_backwards_to_a_process_that_saw_more() -> None:
    old, _ = advance(UNSET, T0, KEYS, INSTANCE)
    newer, _ = advance(old, T0 + timedelta(days=10), KEYS, INSTANCE)
    seen = Seen(newer.seq, newer.instant or T0)
    # A valid older row copied back (a restored backup, a replay).
    assert inspect(old, KEYS, INSTANCE, seen).integrity is WatermarkIntegrity.BACKWARDS
    assert inspect(UNSET, KEYS, INSTANCE, seen).integrity is WatermarkIntegrity.BACKWARDS
    following, _ = advance(old, T0 + timedelta(days=1), KEYS, INSTANCE, seen)
    assert following.instant == newer.instant
    assert following.evidence == "backwards"
    assert inspect(None, KEYS, INSTANCE).integrity is WatermarkIntegrity.TAMPERED


def test_key_rotation_and_a_wrong_key() -> None:
    row, _ = advance(UNSET, T0, KEYS, INSTANCE)
    rotating = WatermarkKeys.derive(b"n" * 32, previous=b"k" * 32)
    assert inspect(row, rotating, INSTANCE).integrity is WatermarkIntegrity.INTACT
    following, _ = advance(row, T0, rotating, INSTANCE)
    assert inspect(following, WatermarkKeys.derive(b"n" * 32), INSTANCE).integrity is (
        WatermarkIntegrity.INTACT
    )
    assert inspect(row, WatermarkKeys.derive(b"x" * 32), INSTANCE).integrity is (
        WatermarkIntegrity.TAMPERED
    )
    # Bound to the instance: a row copied from another deployment does not verify.
    assert inspect(row, KEYS, "another-instance").integrity is WatermarkIntegrity.TAMPERED


def test_without_a_master_key_it_is_reported_unprotected() -> None:
    keys = WatermarkKeys.derive(None)
    row, _ = advance(UNSET, T0, keys, INSTANCE)
    assert inspect(row, keys, INSTANCE).integrity is WatermarkIntegrity.UNPROTECTED
