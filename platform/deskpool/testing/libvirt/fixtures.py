"""pytest fixtures on real libvirt: ``pytest_plugins = ["deskpool.testing.libvirt.fixtures"]``.

- ``libvirt_lab`` (session): a :class:`~deskpool.testing.libvirt.LibvirtLab` made for this
  test process (storage pool, template domain booting the tiny guest, owner tag; in a parallel
  run, each xdist worker's own, named after its process), removed with everything in it at the
  end. Fails, never skips, when libvirt does not answer, saying how
  to start it.
- ``libvirt_connection``: the lab's ``(endpoint, credentials)`` for a driver: the TCP
  listener on loopback with the suite's SASL user, a remote URI libvirt really authenticates.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from deskpool.testing.libvirt import TCP_URI, LibvirtLab, LibvirtMissing, sasl_password


@pytest.fixture(scope="session")
def libvirt_lab() -> Iterator[LibvirtLab]:
    """This run's namespace on the local libvirt (see the module documentation)."""
    try:
        lab = LibvirtLab().create()
    except LibvirtMissing as error:
        pytest.fail(str(error), pytrace=False)
    try:
        yield lab
    finally:
        lab.remove()


@pytest.fixture
def libvirt_credentials() -> dict[str, str]:
    """The SASL credentials of the suite's user for :data:`TCP_URI`."""
    try:
        return {"username": "deskpool-test", "password": sasl_password()}
    except LibvirtMissing as error:
        pytest.fail(str(error), pytrace=False)


__all__ = ["TCP_URI", "libvirt_credentials", "libvirt_lab"]
