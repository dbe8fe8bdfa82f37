"""A library's record of an outage is one line: asyncpg's pool logs no traceback for one."""

from __future__ import annotations

import json
import logging
import sys

from deskpool.log import JsonFormatter, configure_logging
from deskpool.outages import OutageWithoutTraceback


def _record(error: BaseException) -> logging.LogRecord:
    try:
        raise error
    except BaseException:
        exc_info = sys.exc_info()
    return logging.LogRecord(
        "asyncpg.pool", logging.WARNING, __file__, 1, "Failed to restore %s", ("it",), exc_info
    )


def test_an_outage_is_folded_into_the_message_without_its_traceback() -> None:
    entry = _record(ConnectionRefusedError(111, "Connect call failed"))
    assert OutageWithoutTraceback().filter(entry)
    line = json.loads(JsonFormatter().format(entry))
    assert "exception" not in line
    assert line["message"] == (
        "Failed to restore it (ConnectionRefusedError: [Errno 111] Connect call failed)"
    )
    assert line["level"] == "warning"


def test_any_other_exception_keeps_its_traceback() -> None:
    entry = _record(ValueError("a bug"))
    assert OutageWithoutTraceback().filter(entry)
    assert "Traceback" in json.loads(JsonFormatter().format(entry))["exception"]


def test_configured_logging_filters_the_pool_logger_once() -> None:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        configure_logging("info", "production")
        configure_logging("info", "production")
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in handlers:
            root.addHandler(handler)
        root.setLevel(level)
    filters = logging.getLogger("asyncpg.pool").filters
    assert sum(isinstance(f, OutageWithoutTraceback) for f in filters) == 1
