"""The stream guard alone: what passes untouched, index reuse, and what a closing tunnel reports."""

from __future__ import annotations

import base64

from deskpool.client_policy.model import DEFAULT_CLIENT_POLICY, ClientPolicyChange, Transfer
from deskpool.guacamole import encode
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
