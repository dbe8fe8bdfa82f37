"""The stream guard alone: what passes untouched, index reuse, and what a closing tunnel reports."""

from __future__ import annotations

import base64

import pytest

from deskpool.client_policy.model import DEFAULT_CLIENT_POLICY, ClientPolicyChange, Transfer
from deskpool.guacamole import ProtocolError, encode
from deskpool_gateway import transfers
from deskpool_gateway.transfers import DIRECTORY_MIMETYPE, TRANSFER_NOTICE, StreamGuard

LOCKED = ClientPolicyChange(
    {"clipboard": {"to_browser": {"mode": "off"}}, "file_transfer": {"download": True}}
).applied_to(DEFAULT_CLIENT_POLICY)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


#: What the browser is sent instead of a copy the policy withholds: word of it, not the text.
COPY_WITHHELD = encode("msg", TRANSFER_NOTICE, "clipboard", "clipboard_off", "", 0)


def test_text_with_no_governed_stream_passes_as_the_same_object() -> None:
    reported: list[Transfer] = []
    guard = StreamGuard(LOCKED, reported.append)
    display = encode("img", 1, 14, 0, "image/png", 0, 0) + encode("blob", 1, b64(b"png"))
    display += encode("end", 1) + encode("sync", 1, 1)
    forwarded, answer = guard.from_daemon(display)
    assert forwarded is display
    assert answer == ""
    keys = encode("key", 65, 1) + encode("mouse", 1, 2, 0)
    assert guard.from_browser(keys)[0] is keys
    assert reported == []


def test_a_directory_listing_passes_and_a_reused_index_reports_the_stream_it_replaces() -> None:
    reported: list[Transfer] = []
    guard = StreamGuard(LOCKED, reported.append)
    listing = encode("body", 0, 4, DIRECTORY_MIMETYPE, "/") + encode("blob", 4, b64(b"{}"))
    assert guard.from_daemon(listing)[0] == listing
    # A download left open (no end), then its index reused by a copy: the download is reported.
    guard.from_daemon(encode("file", 6, "application/octet-stream", "a.bin"))
    guard.from_daemon(encode("blob", 6, b64(b"abc")))
    forwarded, _ = guard.from_daemon(encode("clipboard", 6, "text/plain"))
    assert forwarded == COPY_WITHHELD
    assert [(t.kind.value, t.outcome, t.size) for t in reported] == [("file", "allowed", 3)]
    guard.close()
    assert [(t.kind.value, t.reason) for t in reported[1:]] == [("clipboard", "clipboard_off")]


def test_a_policy_replaced_governs_the_next_stream_not_the_one_under_way() -> None:
    reported: list[Transfer] = []
    guard = StreamGuard(DEFAULT_CLIENT_POLICY, reported.append)
    assert guard.from_daemon(encode("clipboard", 2, "text/plain"))[0] != ""
    guard.policy = LOCKED
    assert guard.from_daemon(encode("blob", 2, b64(b"still")))[0] != ""
    assert guard.from_daemon(encode("clipboard", 4, "text/plain"))[0] == COPY_WITHHELD
    guard.from_daemon(encode("end", 2) + encode("end", 4))
    assert [(t.outcome, t.delivered) for t in reported] == [("allowed", 5), ("refused", 0)]


def _messages() -> list[str]:
    """Messages from the desktop mixing drawing, governed streams and look-alikes of them."""
    draw = "".join(
        encode("rect", 0, x, 0, 9, 9) + encode("cfill", 14, 0, 1, 2, 3, 255) for x in range(40)
    )
    image = encode("img", 1, 14, 0, "image/png", 0, 0) + encode("blob", 1, b64(b"p" * 900))
    return [
        draw + image + encode("end", 1) + encode("sync", 1, 1),
        # A copy (cut at 4 bytes), its short blob and end inside a run of short drawing, and a
        # name holding what looks like a blob (a short element: the run is walked carefully).
        draw
        + encode("clipboard", 2, "text/plain")
        + encode("blob", 2, b64(b"abcdef"))
        + encode("name", "x.blob,1")
        + draw
        + encode("end", 2)
        + draw,
        # A download over two messages, a print job refused, a name in two scripts.
        encode("file", 4, "application/octet-stream", "h\u00e9llo \u4e16\u754c.txt")
        + encode("blob", 4, b64(b"12345"))
        + draw,
        encode("blob", 4, b64(b"678"))
        + draw
        + encode("end", 4)
        + encode("file", 6, "application/pdf", "doc.pdf")
        + encode("blob", 6, b64(b"%PDF"))
        + encode("end", 6)
        + encode("sync", 2, 1),
        draw + encode("end", 8) + encode("blob", 8, "AAAA"),  # no such stream: untouched
    ]


def test_the_walk_forwards_what_the_parser_would_and_leaves_the_rest_as_it_came() -> None:
    policy = ClientPolicyChange(
        {
            "clipboard": {"to_browser": {"max_bytes": 4}},
            "file_transfer": {"download": True, "max_file_bytes": 6},
            "printing": False,
        }
    ).applied_to(DEFAULT_CLIENT_POLICY)
    walked: list[Transfer] = []
    parsed: list[Transfer] = []
    fast, reference = StreamGuard(policy, walked.append), StreamGuard(policy, parsed.append)
    for message in _messages():
        expected = transfers._parsed(message, reference._daemon_instruction)
        assert fast.from_daemon(message) == expected
    assert walked == parsed
    assert [(t.kind.value, t.outcome, t.delivered) for t in walked] == [
        ("clipboard", "cut", 4),
        ("file", "cut", 6),
        ("print", "refused", 0),
    ]
    # Text whose lengths do not add up goes to the parser, which refuses it as before.
    with pytest.raises(ProtocolError):
        fast.from_daemon(encode("clipboard", 10, "text/plain") + "4.blob,2.10,2.ab!")
