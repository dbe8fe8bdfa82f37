"""The job recorder test plugin (``tests/fixtures/plugins/deskpool_jobrecorder.py``) for e2e tests.

Its ``record`` jobs and ``tick`` periodic task note every execution, with the lease's fence and
the worker's pid, in two tables of the test's database: :data:`RECORDING_TABLES` makes them;
:func:`recorder_site` installs the plugin where ``PYTHONPATH`` can point a worker process.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

#: The plugin's entry point.
RECORDER = {
    "deskpool.plugins": {"jobrecorder": "deskpool_jobrecorder"},
}

#: The tables the plugin writes its records into.
RECORDING_TABLES = """
CREATE TABLE job_executions (
    job_id bigint NOT NULL, attempt integer NOT NULL, fence bigint NOT NULL, pid integer NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE periodic_executions (
    id bigserial PRIMARY KEY, fence bigint NOT NULL, started_at timestamptz NOT NULL,
    finished_at timestamptz, pid integer NOT NULL
);
"""


def recorder_site(plugin_site: Callable[..., Path]) -> Path:
    """A folder holding the recorder plugin installed (``plugin_site``: the fixture)."""
    return plugin_site("deskpool-jobrecorder", ["deskpool_jobrecorder"], RECORDER)
