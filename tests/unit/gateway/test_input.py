"""What of a browser's input the gateway forwards, holds or drops (deskpool_gateway.input)."""

from __future__ import annotations

import pytest

from deskpool.guacamole import encode
from deskpool_gateway.input import BrowserInput, HeldInputOverflow


def test_input_is_held_until_release_then_forwarded_in_order() -> None:
    gate = BrowserInput(read_only=False, limit=10_000)
    early = encode("size", 1280, 800) + encode("key", 97, 1)
    assert gate.admit(early) == ""
    assert gate.admit(encode("mouse", 1, 2, 0)) == ""
    assert gate.held == len(early + encode("mouse", 1, 2, 0))
    assert gate.release() == early + encode("mouse", 1, 2, 0)
    assert gate.held == 0
    later = encode("key", 98, 1)
    assert gate.admit(later) == later


def test_keep_alives_and_disconnect_pass_at_once_around_held_input() -> None:
    gate = BrowserInput(read_only=False, limit=10_000)
    text = encode("nop") + encode("size", 800, 600) + encode("disconnect")
    assert gate.admit(text) == encode("nop") + encode("disconnect")
    assert gate.release() == encode("size", 800, 600)


def test_answers_to_required_pass_while_the_daemon_connects() -> None:
    gate = BrowserInput(read_only=False, limit=10_000)
    answer = encode("argv", 3, "text/plain", "password") + encode("blob", 3, "czNjcmV0")
    clipboard = encode("clipboard", 4, "text/plain") + encode("blob", 4, "aGk=")
    assert gate.admit(answer + clipboard + encode("end", 3) + encode("end", 4)) == answer + (
        encode("end", 3)
    )
    assert gate.release() == clipboard + encode("end", 4)


def test_holding_more_than_the_limit_is_an_overflow() -> None:
    gate = BrowserInput(read_only=False, limit=1024)
    moves = "".join(encode("mouse", x, x, 0) for x in range(100))  # about 2,000 characters
    with pytest.raises(HeldInputOverflow):
        gate.admit(moves)


def test_a_read_only_tunnel_forwards_only_acknowledgements_keep_alives_and_disconnect() -> None:
    gate = BrowserInput(read_only=True, limit=10_000)
    gate.release()
    text = (
        encode("key", 97, 1)
        + encode("sync", 123)
        + encode("mouse", 1, 2, 1)
        + encode("ack", 1, "OK", 0)
        + encode("size", 10, 10)
        + encode("argv", 3, "text/plain", "password")
        + encode("nop")
        + encode("disconnect")
    )
    expected = encode("sync", 123) + encode("ack", 1, "OK", 0) + encode("nop")
    assert gate.admit(text) == expected + encode("disconnect")
