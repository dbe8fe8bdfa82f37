"""A pytest plugin that fails the run when a test secret shows up in captured logs or output.

Tests make their secrets through the ``leak_guard`` fixture: ``leak_guard.plaintext(label)``
returns a credential that carries :data:`CANARY`, and ``leak_guard.master_key()`` a master key
(base64) that the guard remembers. The guard then looks, for the whole run, for any of them in
plain text, hex or base64 (at every alignment), and for the envelope store's sealed-value
header in the forms a log line would show it (``repr`` of bytes, hex, base64):

- every log record emitted while a test runs (setup, call and teardown), at DEBUG, since the
  root logger is lowered to DEBUG while the guard watches: message, structured fields,
  traceback;
- pytest's captured stdout, stderr and log sections of every test;
- the output of ``deskpool`` processes a test started, passed to ``leak_guard.scan(text, where)``.

``tests/test_zz_no_secret_in_logs.py`` is moved to the end of the run and fails listing where a
secret appeared (never the secret itself); findings made after it ran, or in a run that did not
select it, fail the session at its end.

In a parallel run (pytest-xdist), each worker has a guard of its own and the final check sees
only its worker's findings: every worker hands the findings to the controller when it finishes
(``workeroutput``), and the controller fails the session at its end on any that no final check
reported, listing them, whichever worker made them.

``isolated_database_url`` gives a test a migrated database outside the run's shared one (one
per test module), with no sealed value in it: a test that seals values must not leave them in
the shared database, where they would (rightly) stop the api from starting without a key in
other tests.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import ahocorasick
import asyncpg
import pytest

from deskpool_envelope.store import FORMAT_VERSION, MAGIC

#: Every test plaintext contains this, so one search finds any of them (and any part of one
#: long enough to hold it).
CANARY = "DPLEAKCANARY"

#: The module holding the final check, moved to the end of the run.
FINAL_CHECK_MODULE = "test_zz_no_secret_in_logs.py"

_STANDARD_RECORD_ATTRS = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message",
    "asctime",
}


def encoded_forms(value: bytes) -> dict[str, str]:
    """The ways ``value`` can appear in text: as is, hex, and base64 at each alignment.

    Base64 of a longer string containing ``value`` contains, depending on where ``value``
    starts modulo 3, one of three substrings; each is the encoding of ``value`` behind 0, 1 or
    2 filler bytes, with the characters the filler or the end touch cut off.
    """
    forms = {"as text": value.decode("latin-1"), "hex": value.hex()}
    for name, encode in (
        ("base64", base64.b64encode),
        ("url-safe base64", base64.urlsafe_b64encode),
    ):
        for offset in range(3):
            encoded = encode(b"\0" * offset + value).decode("ascii").rstrip("=")
            start = -(-offset * 8 // 6)
            end = (offset + len(value)) * 8 // 6
            forms[f"{name} at offset {offset}"] = encoded[start:end]
    return forms


@dataclass(frozen=True)
class Finding:
    """Where a secret appeared and which one (by label, never by value)."""

    where: str
    what: str

    def __str__(self) -> str:
        return f"{self.where}: {self.what}"


class LeakGuard:
    """The secrets of a test run and the places they must not appear.

    :param canary: what every plaintext carries (the guard's own tests use another one, so
        that what they log on purpose is not a finding of the run).
    """

    def __init__(self, canary: str = CANARY) -> None:
        self.canary = canary
        self._forms: dict[str, str] = {}
        for form, text in encoded_forms(canary.encode()).items():
            self._forms[text] = f"a test plaintext ({form})"
        header = MAGIC + bytes([FORMAT_VERSION])
        self._forms[repr(header)[2:-1]] = "a sealed value (repr of bytes)"
        for form, text in encoded_forms(header).items():
            if form != "as text":
                self._forms[text] = f"a sealed value ({form})"
        self._automaton: ahocorasick.Automaton | None = None
        self._keys = 0
        self.findings: list[Finding] = []
        self.reported = 0

    # -- making secrets

    def plaintext(self, label: str = "secret") -> str:
        """A fresh credential for a test; it carries the canary."""
        return f"{self.canary}-{label}-{secrets.token_urlsafe(12)}"

    def master_key(self) -> str:
        """A fresh master key, base64, remembered in every encoding."""
        raw = os.urandom(32)
        self._keys += 1
        label = f"master key #{self._keys}"
        for form, text in encoded_forms(raw).items():
            if form != "as text":
                self._forms[text] = f"{label} ({form})"
        self._automaton = None
        return base64.b64encode(raw).decode("ascii")

    # -- looking

    @property
    def automaton(self) -> ahocorasick.Automaton:
        """Every remembered form, searched for at once (Aho-Corasick).

        A regular expression alternating the forms cost a run minutes: compiled again for
        every master key (hundreds of keys, thousands of forms in a run) and tried form by
        form at every position of every log record. The automaton is rebuilt in C in
        milliseconds and reads a text once, whatever the number of forms.
        """
        if self._automaton is None:
            automaton = ahocorasick.Automaton()
            for text, label in self._forms.items():
                automaton.add_word(text, label)
            automaton.make_automaton()
            self._automaton = automaton
        return self._automaton

    def found_in(self, text: str) -> list[str]:
        """What of the remembered secrets ``text`` contains (labels)."""
        return sorted({label for _end, label in self.automaton.iter(text)})

    def scan(self, text: str, where: str) -> list[str]:
        """Record every secret found in ``text``; return what was found."""
        found = self.found_in(text)
        for what in found:
            finding = Finding(where, what)
            if finding not in self.findings:
                self.findings.append(finding)
        return found

    @contextmanager
    def watching(self, where: str) -> Iterator[None]:
        """Scan every log record emitted inside the block, at DEBUG and above."""
        handler = _ScanningHandler(self, where)
        root = logging.getLogger()
        level = root.level
        root.addHandler(handler)
        root.setLevel(logging.DEBUG)
        try:
            yield
        finally:
            root.removeHandler(handler)
            root.setLevel(level)


def record_text(record: logging.LogRecord) -> str:
    """Everything a log line can show of ``record``."""
    try:
        parts = [record.getMessage()]
    except (TypeError, ValueError):
        parts = [str(record.msg), repr(record.args)]
    parts += [
        f"{key}={value}"
        for key, value in vars(record).items()
        if key not in _STANDARD_RECORD_ATTRS and not key.startswith("_")
    ]
    if record.exc_info:
        parts.append(logging.Formatter().formatException(record.exc_info))
    if record.stack_info:
        parts.append(record.stack_info)
    return "\n".join(parts)


class _ScanningHandler(logging.Handler):
    def __init__(self, guard: LeakGuard, where: str) -> None:
        super().__init__(logging.NOTSET)
        self.guard = guard
        self.where = where

    def emit(self, record: logging.LogRecord) -> None:
        self.guard.scan(record_text(record), f"{self.where}: log record of {record.name}")


# ------------------------------------------------------------------------------------ hooks

_GUARD_KEY = pytest.StashKey[LeakGuard]()


def guard_of(config: pytest.Config) -> LeakGuard:
    """The guard of this run."""
    return config.stash[_GUARD_KEY]


#: The key of a worker's findings in pytest-xdist's ``workeroutput``: ``[[where, what,
#: reported], ...]``, plain lists for the channel between processes.
WORKER_OUTPUT_KEY = "deskpool_leak_findings"


def pytest_configure(config: pytest.Config) -> None:
    """Start a guard for the run and register the hooks that feed it."""
    guard = LeakGuard()
    config.stash[_GUARD_KEY] = guard
    config.pluginmanager.register(LeakGuardHooks(guard), "deskpool-secret-leak-guard")
    if config.pluginmanager.hasplugin("xdist") and not hasattr(config, "workerinput"):
        config.pluginmanager.register(ControllerHooks(guard), "deskpool-secret-leak-controller")


class LeakGuardHooks:
    """The hooks that show the guard every test's logs and captured output."""

    def __init__(self, guard: LeakGuard) -> None:
        self.guard = guard

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        """Run the final check last, after every test whose logs it judges."""
        final = [i for i in items if i.nodeid.split("::")[0].endswith(FINAL_CHECK_MODULE)]
        items[:] = [item for item in items if item not in final] + final

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Any:
        """Watch the log records of a test's setup."""
        with self.guard.watching(f"{item.nodeid} (setup)"):
            return (yield)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Any:
        """Watch the log records of a test's call."""
        with self.guard.watching(f"{item.nodeid} (call)"):
            return (yield)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> Any:
        """Watch the log records of a test's teardown."""
        with self.guard.watching(f"{item.nodeid} (teardown)"):
            return (yield)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Scan what pytest captured of a test: stdout, stderr and log sections."""
        for title, content in report.sections:
            self.guard.scan(content, f"{report.nodeid} ({title})")

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Fail the run on findings the final check did not report.

        On a pytest-xdist worker: hand every finding to the controller, which judges them.
        """
        workeroutput = getattr(session.config, "workeroutput", None)
        if workeroutput is not None:
            workeroutput[WORKER_OUTPUT_KEY] = [
                [finding.where, finding.what, index < self.guard.reported]
                for index, finding in enumerate(self.guard.findings)
            ]
            return
        unreported = self.guard.findings[self.guard.reported :]
        if not unreported:
            return
        terminal = session.config.pluginmanager.get_plugin("terminalreporter")
        if terminal is not None:
            terminal.write_sep("=", "test secrets found in captured logs or output", red=True)
            for finding in unreported:
                terminal.write_line(str(finding))
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


class ControllerHooks:
    """On pytest-xdist's controller: gather the workers' findings into the run's guard.

    The controller's own guard already scans every report's captured sections (the reports
    come back to it); a worker adds what it saw in log records. A finding some worker's final
    check reported counts as reported; the others fail the session
    (:meth:`LeakGuardHooks.pytest_sessionfinish`).
    """

    def __init__(self, guard: LeakGuard) -> None:
        self.guard = guard
        self.reported: list[Finding] = []

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object) -> None:
        """Take the findings of a worker that finished."""
        for where, what, reported in getattr(node, "workeroutput", {}).get(WORKER_OUTPUT_KEY, []):
            finding = Finding(where, what)
            if reported:
                self.reported.append(finding)
            elif finding not in self.guard.findings:
                self.guard.findings.append(finding)

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self) -> None:
        """Put the findings some final check reported first, counted as reported."""
        rest = [finding for finding in self.guard.findings if finding not in self.reported]
        self.guard.findings[:] = self.reported + rest
        self.guard.reported = len(self.reported)


# --------------------------------------------------------------------------------- fixtures


@pytest.fixture
def leak_guard(request: pytest.FixtureRequest) -> LeakGuard:
    """The run's guard: make test secrets with it, and scan process output with it."""
    return guard_of(request.config)


@pytest.fixture
def isolated_database_url(module_database_url: str) -> str:
    """A migrated database outside the run's shared one, with no sealed value in it."""

    async def empty() -> None:
        connection = await asyncpg.connect(module_database_url)
        try:
            await connection.execute("TRUNCATE sealed_secrets")
        finally:
            await connection.close()

    asyncio.run(empty())
    return module_database_url


@pytest.fixture
def sealing_environ(
    secure_environ: dict[str, str], isolated_database_url: str, leak_guard: LeakGuard
) -> dict[str, str]:
    """The secure test environment on the module's database, with a master key.

    For tests that seal secrets: never on the run's shared database (sealed values left there
    would stop the api from starting without a key in other tests).
    """
    return {
        **secure_environ,
        "DATABASE_URL": isolated_database_url,
        "SECRETS_MASTER_KEY": leak_guard.master_key(),
    }
