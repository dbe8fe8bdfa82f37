"""Process logging: ``LOG_LEVEL``, and JSON lines when ``APP_ENV`` is not ``development``.

One request is one log line (written by the API's request middleware) with its request id,
method, route, status and duration. Secrets never reach a log: configuration is logged through
:meth:`deskpool.config.Config.display`, which redacts them.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "error": logging.ERROR,
}

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

    def format(self, record: logging.LogRecord) -> str:
        """Render ``record`` as text."""
        line = super().format(record)
        fields = [
            f"{key}={value}"
            for key, value in vars(record).items()
            if key not in _STANDARD_ATTRS and not key.startswith("_")
        ]
        return f"{line} {' '.join(fields)}" if fields else line


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
