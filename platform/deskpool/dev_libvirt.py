"""``deskpool dev --hypervisor libvirt``: the quick start's demo on real tiny VMs.

The local libvirt (``qemu:///system``; ``scripts/ensure-libvirt.sh`` installs and starts it,
``make run HYPERVISOR=libvirt`` runs it first) gets, once, a storage pool and a template domain
booting the project's tiny guest (:mod:`deskpool.testing.libvirt`: a Debian kernel and a
busybox initramfs with the QEMU guest agent, built from Debian packages and cached), all named
with a prefix (``deskpool-dev`` unless ``--libvirt-prefix`` says otherwise). Later runs reuse
them. The demo cluster is a ``libvirt`` cluster of that URI and the demo pool's desktops are
linked clones of the template, named with the prefix too. Their VNC displays listen on loopback,
where the desktop daemon simulator bridges them (:mod:`deskpool.desktopd.vnc`).

To remove everything the demo made on libvirt: stop ``deskpool dev``, delete the pool (or the
database), then ``python -c "from deskpool.testing.libvirt import LibvirtLab;
LibvirtLab(prefix='deskpool-dev').remove()"``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["LIBVIRT_URI", "libvirt_demo"]

#: The libvirt the demo runs on.
LIBVIRT_URI = "qemu:///system"


def ensure_template(prefix: str, uri: str) -> str:
    """The demo's template domain, made (with its storage pool) unless it exists; its name.

    :raises SystemExit: libvirt does not answer (the message says how to start it).
    """
    import libvirt

    from deskpool.testing.libvirt import LibvirtLab, LibvirtMissing, check_libvirt

    lab = LibvirtLab(prefix=prefix, uri=uri)
    try:
        check_libvirt(uri)
    except LibvirtMissing as error:
        raise SystemExit(f"deskpool dev --hypervisor libvirt: {error}") from None
    connection = libvirt.open(uri)
    try:
        names = {domain.name() for domain in connection.listAllDomains(0)}
    finally:
        connection.close()
    if lab.template not in names:
        lab.remove()  # what a run interrupted while it made them left behind
        lab.create()
    return lab.template


def libvirt_demo(prefix: str, uri: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The demo cluster and pool on the local libvirt, its template made first."""
    template = ensure_template(prefix, uri)
    cluster = {"name": "local-libvirt", "driver": "libvirt", "endpoint": uri}
    pool = {
        "name": "demo-vms",
        "description": "Created by deskpool dev --hypervisor libvirt",
        "template": template,
        "kind": "non_persistent",
        "os_type": "linux",
        "clone_mode": "linked",
        "min_size": 2,
        "spare": 0,
        "max_size": 3,
        "naming_pattern": f"{prefix}-{{n:02}}",
    }
    return cluster, pool
