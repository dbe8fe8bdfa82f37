"""Licensing: editions and signed licenses, enforcement, the expiry watermark, the build manifest.

The parts, in the layers of the platform:

- :mod:`~deskpool.licensing.model`: the domain with no I/O: editions and their limits (declared
  once, in :data:`~deskpool.licensing.model.EDITION_LIMITS`), what a verified license says, the
  judgement of expiry and grace against the clock and the watermark, and the enforcement
  decisions ("may one more desktop be created?").
- :mod:`~deskpool.licensing.document`: the license document with no I/O: its format, signing
  and verification, and the refusals of a document that cannot be installed.
- :mod:`~deskpool.licensing.keys`: the vendor public keys built into this version.
- :mod:`~deskpool.licensing.watermark`: the MAC that protects the stored watermark.
- :mod:`~deskpool.licensing.store`: the SQL of the installed license, the watermark and the
  activation-report bookkeeping.
- :mod:`~deskpool.licensing.service`: the use cases (install, remove, show the state, check a
  growth) that the API, the CLI, the worker and the reconciler call.
- :mod:`~deskpool.licensing.tasks`: the worker's periodic tasks (watermark, activation report).
- :mod:`~deskpool.licensing.manifest`: the signed build manifest (build, verify).

Operators read ``docs/operators/licensing.md``; the release pipeline ``docs/release.md``.
"""
