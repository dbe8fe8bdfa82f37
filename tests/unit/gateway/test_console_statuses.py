"""The console words every status the gateway can close a tunnel with (desktop/status.ts)."""

from __future__ import annotations

import re

from tests.support.paths import REPO

from deskpool.guacamole import Status

STATUS_TS = REPO / "web" / "src" / "desktop" / "status.ts"


def test_every_gateway_status_has_words_in_the_console() -> None:
    source = STATUS_TS.read_text()
    described = {int(code, 16) for code in re.findall(r"^\s+0x([0-9a-fA-F]{4}): \{", source, re.M)}
    missing = sorted(
        f"{status.name} ({int(status)})" for status in Status if status not in described
    )
    assert not missing, f"web/src/desktop/status.ts has no words for {missing}"
