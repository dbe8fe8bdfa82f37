"""The client policy's rules: defaults, documents, validation, what each protocol offers, guacd."""

from __future__ import annotations

from deskpool.client_policy.model import (
    DEFAULT_CLIENT_POLICY,
    GUACD_CLIPBOARD_BYTES,
    MAX_CLIPBOARD_BYTES,
    ClientPolicy,
    ClientPolicyChange,
    ClipboardMode,
    changed_members,
    guacd_arguments,
    offered,
    render_watermark,
    validate_client_policy,
    watermark_text_problem,
)
from deskpool.sessions.model import PolicyChange, SessionPolicy, validate_policy


def test_the_default_keeps_todays_behaviour() -> None:
    policy = DEFAULT_CLIENT_POLICY
    assert policy.clipboard_to_desktop.mode is ClipboardMode.TEXT
    assert policy.clipboard_to_browser.max_bytes == GUACD_CLIPBOARD_BYTES == 262144
    assert (policy.files.upload, policy.files.download) == (False, False)
    assert policy.audio_out
    assert not policy.microphone
    assert not policy.printing
    assert not policy.watermark.enabled
    assert SessionPolicy().client == policy


def test_a_document_round_trips_and_a_partial_one_keeps_the_rest() -> None:
    document = DEFAULT_CLIENT_POLICY.as_json()
    assert ClientPolicy.from_json(document) == DEFAULT_CLIENT_POLICY
    assert ClientPolicy.from_json(None) == DEFAULT_CLIENT_POLICY
    change = ClientPolicyChange(
        {"clipboard": {"to_browser": {"mode": "off"}}, "watermark": {"enabled": True}}
    )
    changed = change.applied_to(DEFAULT_CLIENT_POLICY)
    assert changed.clipboard_to_browser.mode is ClipboardMode.OFF
    assert changed.clipboard_to_browser.max_bytes == GUACD_CLIPBOARD_BYTES
    assert changed.clipboard_to_desktop.mode is ClipboardMode.TEXT
    assert changed.watermark.enabled
    assert changed.watermark.text == DEFAULT_CLIENT_POLICY.watermark.text
    assert changed_members(DEFAULT_CLIENT_POLICY, changed) == {
        "clipboard.to_browser.mode": ["text", "off"],
        "watermark.enabled": [False, True],
    }
    # Through the session policy: a change that leaves the client out keeps it.
    base = SessionPolicy(client=changed)
    assert PolicyChange(logoff_delay=5).applied_to(base).client == changed


def test_limits_up_to_fifty_mebibytes_and_bad_members_are_pointed_at() -> None:
    big = ClientPolicyChange(
        {"clipboard": {"to_desktop": {"max_bytes": 20 * 1024 * 1024}}}
    ).applied_to(DEFAULT_CLIENT_POLICY)
    assert validate_client_policy(big) == []
    bad = ClientPolicyChange(
        {
            "clipboard": {"to_browser": {"max_bytes": MAX_CLIPBOARD_BYTES + 1}},
            "file_transfer": {"max_file_bytes": 0},
            "watermark": {"opacity": 0.0, "angle": 91, "spacing": 10, "text": "{password}"},
        }
    ).applied_to(DEFAULT_CLIENT_POLICY)
    pointers = [error.pointer for error in validate_policy(SessionPolicy(client=bad))]
    assert pointers == [
        "/session_policy/client/clipboard/to_browser/max_bytes",
        "/session_policy/client/file_transfer/max_file_bytes",
        "/session_policy/client/watermark/text",
        "/session_policy/client/watermark/opacity",
        "/session_policy/client/watermark/angle",
        "/session_policy/client/watermark/spacing",
    ]


def test_watermark_templates() -> None:
    assert watermark_text_problem("{name} <{email}> {session_id} {client_address} {time}") is None
    assert watermark_text_problem("{name!r}") is not None
    assert watermark_text_problem("{name:>20}") is not None
    assert watermark_text_problem("{") is not None
    assert watermark_text_problem("two\nlines") is not None
    assert watermark_text_problem(" ") is not None
    assert watermark_text_problem("x" * 201) is not None
    text = render_watermark("{name} · {time} {{literal}}", {"name": "Ada"})
    assert text == "Ada ·  {literal}"


def test_vnc_offers_no_printing_no_microphone_and_files_only_through_sftp() -> None:
    everything = ClientPolicyChange(
        {
            "file_transfer": {"upload": True, "download": True},
            "audio": {"microphone": True},
            "printing": True,
        }
    ).applied_to(DEFAULT_CLIENT_POLICY)
    assert offered(everything, "rdp", {}) == everything
    vnc = offered(everything, "vnc", {})
    assert not (vnc.files.upload)
    assert not (vnc.files.download)
    assert not (vnc.microphone)
    assert not (vnc.printing)
    assert not vnc.audio_out
    sftp = offered(everything, "vnc", {"enable-sftp": "true", "enable-audio": "true"})
    assert sftp.files.upload
    assert sftp.files.download
    assert sftp.audio_out


def test_guacd_arguments_follow_the_policy() -> None:
    rdp = guacd_arguments(DEFAULT_CLIENT_POLICY, "rdp", "s1")
    assert rdp["disable-copy"] == rdp["disable-paste"] == "false"
    assert rdp["enable-drive"] == "false"
    assert rdp["disable-upload"] == rdp["disable-download"] == "true"
    assert rdp["disable-audio"] == "false"
    assert rdp["enable-audio-input"] == rdp["enable-printing"] == "false"
    assert "drive-path" not in rdp
    locked = ClientPolicyChange(
        {
            "clipboard": {"to_desktop": {"mode": "off"}, "to_browser": {"mode": "off"}},
            "file_transfer": {"download": True},
            "audio": {"output": False, "microphone": True},
            "printing": True,
        }
    ).applied_to(DEFAULT_CLIENT_POLICY)
    rdp = guacd_arguments(locked, "rdp", "s1")
    assert rdp["disable-copy"] == rdp["disable-paste"] == "true"
    assert rdp["enable-drive"] == "true"
    assert rdp["drive-path"].endswith("/s1")
    assert rdp["disable-upload"] == "true"
    assert rdp["disable-download"] == "false"
    assert rdp["disable-audio"] == rdp["enable-audio-input"] == rdp["enable-printing"] == "true"
    vnc = guacd_arguments(offered(locked, "vnc", {}), "vnc", "s1")
    assert vnc["disable-copy"] == "true"
    assert vnc["enable-sftp"] == "false"
    assert vnc["enable-audio"] == "false"
    assert "enable-printing" not in vnc
