"""Process logging: ``LOG_LEVEL``, and JSON lines when ``APP_ENV`` is not ``development``.

One request is one log line (written by the API's request middleware) with its request id,
method, route, status and duration. Secrets never reach a log: configuration is logged through
:meth:`deskpool.config.Config.display`, which redacts them.

Nobody can write a line of their own into a log: both formatters escape control characters
(C0, DEL, C1, the Unicode line and paragraph separators, unpaired surrogates) in every value
they write, the message and each ``extra=`` field alike, so a request path or header holding
CR, LF or ESC is logged with each written as a backslash escape. JSON lines are escaped by
JSON itself; text lines by :func:`escape_controls`, and a traceback's lines are indented so
that no line of it can pass for a record.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from datetime import UTC, datetime
from typing import Any

from deskpool.outages import LIBRARY_LOGGERS, OutageWithoutTraceback

LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "error": logging.ERROR,
}

#: Control characters and what a text log writes instead (backslash escapes).
_CONTROLS = {code: f"\\x{code:02x}" for code in (*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0))} | {
    code: f"\\u{code:04x}" for code in (0x2028, 0x2029, *range(0xD800, 0xE000))
}
_CONTROLS |= {0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"}
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")


def escape_controls(text: str) -> str:
    """``text`` with every control character written as a backslash escape."""
    if _CONTROL.search(text) is None:
        return text
    return text.translate(_CONTROLS)


# Attributes every LogRecord has; anything else passed through ``extra=`` is a structured field.
_STANDARD_ATTRS = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line, with the ``extra=`` fields as top-level members."""

    def format(self, record: logging.LogRecord) -> str:
        """Render ``record`` as a JSON line."""
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD_ATTRS and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class TextFormatter(logging.Formatter):
    """Readable lines for development, with the ``extra=`` fields appended as key=value."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s", "%H:%M:%S")

    def formatMessage(self, record: logging.LogRecord) -> str:
        """The record's line, its message escaped."""
        record.message = escape_controls(record.message)
        return super().formatMessage(record)

    def formatException(self, ei: Any) -> str:
        """The traceback, every line indented: only a record's own line starts a line."""
        text = super().formatException(ei)
        return "\n".join("    " + escape_controls(line) for line in text.split("\n"))

    def formatStack(self, stack_info: str) -> str:
        """The stack, every line indented."""
        return "\n".join("    " + escape_controls(line) for line in stack_info.split("\n"))

    def format(self, record: logging.LogRecord) -> str:
        """Render ``record`` as text."""
        line = super().format(record)
        fields = [
            f"{key}={escape_controls(str(value))}"
            for key, value in vars(record).items()
            if key not in _STANDARD_ATTRS and not key.startswith("_")
        ]
        if not fields:
            return line
        head, newline, rest = line.partition("\n")
        return f"{head} {' '.join(fields)}{newline}{rest}"


def configure_logging(level: str, app_env: str) -> None:
    """Send every log record to stderr, formatted for ``app_env``, at ``level``."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(TextFormatter() if app_env == "development" else JsonFormatter())
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(LEVELS[level])
    # aiohttp's own access log is replaced by the request middleware's line.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    for name in LIBRARY_LOGGERS:
        library = logging.getLogger(name)
        if not any(isinstance(f, OutageWithoutTraceback) for f in library.filters):
            library.addFilter(OutageWithoutTraceback())
