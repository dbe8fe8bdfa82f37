"""Log lines cannot be forged: control characters are escaped in every logged value."""

from __future__ import annotations

import json
import logging

from deskpool.log import JsonFormatter, TextFormatter, escape_controls

FORGED = "/api/v1/x\r\n12:00:00 INFO    deskpool.api.access: GET /admin 200\x1b[2K\x85\u2028\ud800"


def record(message: str, *args: object, **extra: object) -> logging.LogRecord:
    entry = logging.LogRecord("deskpool.test", logging.WARNING, __file__, 1, message, args, None)
    entry.__dict__.update(extra)
    return entry


def test_escape_controls_writes_every_control_character_as_an_escape() -> None:
    escaped = escape_controls(FORGED)
    assert escaped == (
        "/api/v1/x\\r\\n12:00:00 INFO    deskpool.api.access: GET /admin 200"
        "\\x1b[2K\\x85\\u2028\\ud800"
    )
    assert escape_controls("plain café ✓") == "plain café ✓"
    assert all(escape_controls(chr(code)) != chr(code) for code in range(0x20))


def test_text_lines_escape_the_message_and_every_extra_field() -> None:
    line = TextFormatter().format(record("served %s", FORGED, path=FORGED, status=200))
    assert not {"\n", "\r", "\x1b"} & set(line)
    assert line.count("\\r\\n12:00:00") == 2
    assert line.endswith("status=200")
    line.encode("utf-8")  # an unpaired surrogate would not encode


def test_a_traceback_is_indented_so_no_line_of_it_passes_for_a_record() -> None:
    try:
        raise ValueError(FORGED)
    except ValueError:
        entry = logging.LogRecord(
            "deskpool.test", logging.ERROR, __file__, 1, "failed", (), sys_exc_info()
        )
    text = TextFormatter().format(entry)
    first, *rest = text.split("\n")
    assert first.endswith("deskpool.test: failed")
    assert len(rest) > 3
    assert all(line.startswith("    ") for line in rest)
    forged = "12:00:00 INFO    deskpool.api.access: GET /admin 200\\x1b[2K\\x85\\u2028\\ud800"
    assert f"    {forged}" in rest
    assert not {"\r", "\x1b"} & set(text)


def test_json_lines_are_one_line_whatever_they_carry() -> None:
    line = JsonFormatter().format(record("served %s", FORGED, path=FORGED))
    assert not {"\n", "\r", "\x1b"} & set(line)
    entry = json.loads(line)
    assert entry["message"] == f"served {FORGED}"
    assert entry["path"] == FORGED


def sys_exc_info() -> object:
    import sys

    return sys.exc_info()
