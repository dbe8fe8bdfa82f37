"""The licensing tests' clock."""

from __future__ import annotations

from datetime import UTC, datetime

Headers = dict[str, str]
RESET = """
TRUNCATE license_installation, clusters, jobs, periodic_tasks, audit_events CASCADE;
UPDATE license_watermark SET instant = NULL, seq = 0, evidence = NULL, evidence_detail = NULL,
       evidence_at = NULL, mac = NULL, judged_status = NULL, judged_edition = NULL,
       judged_at = NULL;
UPDATE license_reports SET next_due_at = NULL, last_attempt_at = NULL, last_success_at = NULL,
       last_outcome = NULL, last_error = NULL, consecutive_failures = 0, sent = 0;
"""


class Clock:
    """A clock tests set (forward, or back by a day, a week, a year)."""

    def __init__(self, now: datetime | None = None) -> None:
        self.now = now or datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now
