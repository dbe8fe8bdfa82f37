"""What licensing needs from its process: keys, the clock, the build's verdict, its metrics.

One :class:`LicensingContext` per process (``runtime.licensing``, or made by the CLI). The
clock is injectable (tests set it back by a day, a week, a year); the vendor keys come from the
build (:func:`deskpool.licensing.keys.trusted_keys`); the build manifest is verified once, when
:meth:`LicensingContext.check_build` is first called (at startup).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import asyncpg
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from deskpool import __version__
from deskpool.db.after_commit import AfterCommit
from deskpool.licensing import keys
from deskpool.licensing.manifest import (
    ManifestCheck,
    deskpool_distributions,
    installed_files,
    manifest_path,
    manifest_required,
    verify_manifest,
)
from deskpool.licensing.metrics import LicenseMetrics
from deskpool.licensing.model import CLOCK_SKEW_TOLERANCE, BuildIntegrity, ClockReading, License
from deskpool.licensing.watermark import Seen, WatermarkKeys

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from deskpool.config import Config

log = logging.getLogger(__name__)

#: A license document's verdict: the license, or why it is refused.
Verdict = tuple[License | None, str | None]

Clock = Callable[[], datetime]


def system_clock() -> datetime:
    """The process's clock, in UTC."""
    return datetime.now(UTC)


class LicensingContext:
    """The licensing side of one process.

    :param watermark_keys: the MAC keys of the watermark.
    :param manifest_at: where the signed build manifest is.
    :param metrics: where to show the state, if anywhere.
    :param clock: the time (injectable).
    :param trusted: the vendor keys (injectable; by default the build's, see
        :func:`deskpool.licensing.keys.trusted_keys`).
    """

    def __init__(
        self,
        watermark_keys: WatermarkKeys,
        manifest_at: str = "",
        metrics: LicenseMetrics | None = None,
        *,
        clock: Clock = system_clock,
        trusted: Callable[[], dict[str, Ed25519PublicKey]] | None = None,
        version: str = __version__,
    ) -> None:
        self.watermark_keys = watermark_keys
        self.manifest_at = manifest_at
        self.metrics = metrics
        self.clock = clock
        self.trusted = trusted or (lambda: keys.trusted_keys(manifest_at))
        self.version = version
        #: The highest watermark this process read or wrote (to see it move backwards); only
        #: what was committed (see :meth:`remember`).
        self.seen: Seen | None = None
        #: Holds what this process remembers until the transaction it was read in commits.
        self.commits = AfterCommit()
        #: The skew from the database's clock last logged (``None``: within the tolerance).
        self._skew_logged: timedelta | None = None
        self._build: ManifestCheck | None = None
        #: Whether the last session check found the limit too near to share the growth lock
        #: (a hint only: the next check starts with the exclusive lock, and learns again).
        self.sessions_near_limit = False
        #: The last installed document verified, with the keys it was verified against, and
        #: the verdict (the license, or why it was refused): see ``service._installed_license``.
        self.verified: tuple[tuple[str, tuple[tuple[str, bytes], ...]], Verdict] | None = None

    @classmethod
    def from_config(
        cls, config: Config, registry: CollectorRegistry | None = None
    ) -> LicensingContext:
        """The context of a process configured by ``config``."""
        return cls(
            WatermarkKeys.derive(
                config.get("SECRETS_MASTER_KEY") or None,
                config.get("SECRETS_MASTER_KEY_PREVIOUS") or None,
            ),
            str(config.get("LICENSE_MANIFEST_PATH") or ""),
            LicenseMetrics(registry) if registry is not None else None,
        )

    def now(self) -> datetime:
        """The clock's time."""
        return self.clock()

    def remember(self, connection: asyncpg.Connection, seq: int, instant: datetime | None) -> None:
        """Remember a trusted watermark read or written on ``connection`` (the highest is kept).

        Only once it is committed: in a transaction of :attr:`commits`, when that commits; in a
        transaction opened elsewhere, never (whether it commits is not known here). A watermark
        remembered from a transaction that rolled back would make the stored one look moved
        backwards, which is evidence that the license expired.
        """
        if instant is None:
            return
        self.commits.apply(connection, lambda: self._keep(seq, instant))

    def _keep(self, seq: int, instant: datetime) -> None:
        if self.seen is not None:
            seq, instant = max(seq, self.seen.seq), max(instant, self.seen.instant)
        self.seen = Seen(seq, instant)

    def report_clock(self, reading: ClockReading) -> None:
        """Log a clock skewed from the database's, again when it changes, and when it ends."""
        logged = self._skew_logged
        if reading.skewed:
            if logged is None or abs(reading.from_database - logged) > CLOCK_SKEW_TOLERANCE:
                self._skew_logged = reading.from_database
                log.warning("clock skew: %s", reading.reason())
        elif logged is not None:
            self._skew_logged = None
            log.info("clock skew: this process's clock agrees with the database server's again")

    def check_build(self, *, again: bool = False) -> ManifestCheck:
        """Verify the build manifest (once per process unless ``again``); log the verdict."""
        if self._build is None or again:
            check = verify_manifest(
                manifest_path(self.manifest_at),
                self.trusted(),
                lambda: installed_files(deskpool_distributions()),
                manifest_required(self.manifest_at),
            )
            self._build = check
            level = {
                BuildIntegrity.VERIFIED: logging.INFO,
                BuildIntegrity.UNSIGNED: logging.INFO,
            }.get(check.state, logging.WARNING)
            suffix = (
                ""
                if check.state in {BuildIntegrity.VERIFIED, BuildIntegrity.UNSIGNED}
                else " The free edition's limits apply until the installation is restored."
            )
            log.log(level, "build integrity: %s. %s%s", check.state.value, check.detail, suffix)
            if self.metrics is not None:
                self.metrics.observe_build(check.state)
        return self._build

    def use_build(self, check: ManifestCheck) -> None:
        """Take ``check`` as the build's verdict (tests, or a caller that verified already)."""
        self._build = check
        if self.metrics is not None:
            self.metrics.observe_build(check.state)
