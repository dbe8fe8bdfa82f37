"""The tiny test guest: a Debian kernel and an initramfs with busybox and the QEMU guest agent.

Built by the project itself from Debian packages only (``apt-get download`` and
``dpkg-deb -x``; nothing else is downloaded) and booted by direct kernel boot. The guest:

- prints :data:`SERIAL_BANNER` on its serial console and draws :data:`SCREEN_BANNER` on its
  VGA text console (what a VNC viewer of the domain shows);
- loads the virtio modules (PCI, block, console, network) and sets ``10.0.2.15/24`` on its
  first network interface (QEMU's user-mode network);
- runs ``qemu-ga`` on the ``org.qemu.guest_agent.0`` virtio port, answering ``guest-ping``
  about 5 s after start under TCG, with ``/etc/os-release`` naming it;
- powers off within about 2 s when asked through the agent (``guest-shutdown`` runs the
  ``/sbin/shutdown`` wrapper) or the ACPI power button (busybox ``acpid``).

The result is cached outside the repository under ``/var/tmp/deskpool-guest/<recipe hash>``
(``DESKPOOL_GUEST_CACHE`` overrides the parent folder): the hash covers this module's recipe
and the versions of the packages it is built from, so a new kernel or agent rebuilds it.
Concurrent builders each build into a temporary folder and rename it into place.

``python -m deskpool.testing.libvirt.guest`` builds it (if needed) and prints its folder.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["SCREEN_BANNER", "SERIAL_BANNER", "GuestImage", "build_guest", "guest_cache"]

#: What the guest prints on its serial console once the agent starts.
SERIAL_BANNER = "deskpool test guest: ready"
#: The text the guest draws on its VGA console.
SCREEN_BANNER = "DESKPOOL TEST GUEST"
#: The kernel command line of the guest.
KERNEL_CMDLINE = "console=tty0 console=ttyS0,115200 quiet consoleblank=0 panic=-1"

_KERNEL_PACKAGE = "linux-image-amd64"
_PACKAGES = ("busybox-static", "qemu-guest-agent")
#: Modules the guest loads (with their dependencies), in this order.
_MODULES = (
    "virtio",
    "virtio_ring",
    "virtio_pci",
    "virtio_blk",
    "virtio_console",
    "virtio_net",
    "evdev",
    "button",
)

_INIT = r"""#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /run /tmp /var/run /var/log
mount -t devpts devpts /dev/pts
for module in $(cat /etc/modules-order); do insmod "/lib/modules/$module" 2>/dev/null; done
hostname deskpool-guest
ip link set lo up
for iface in /sys/class/net/*; do
  name=${iface##*/}
  [ "$name" = lo ] && continue
  ip link set "$name" up
  ip addr add 10.0.2.15/24 dev "$name"
  ip route add default via 10.0.2.2 2>/dev/null
  break
done
exec /bin/busybox init
"""

_INITTAB = """::sysinit:/etc/rc.screen
::respawn:/etc/rc.agent
::respawn:/bin/acpid -f -c /etc/acpi -a /etc/acpid.conf
ttyS0::respawn:/bin/sh -c 'exec /bin/sh </dev/ttyS0 >/dev/ttyS0 2>&1'
::shutdown:/bin/echo "deskpool test guest: powering off"
"""

_SCREEN = f"""#!/bin/sh
printf '\\033[2J\\033[H\\n\\n    {SCREEN_BANNER}\\n\\n    booted by deskpool\\n' >/dev/tty1
"""

_AGENT = f"""#!/bin/sh
port=""
while [ -z "$port" ]; do
  for f in /sys/class/virtio-ports/*/name; do
    [ "$(cat "$f" 2>/dev/null)" = org.qemu.guest_agent.0 ] || continue
    d=${{f%/name}}; port=/dev/${{d##*/}}
  done
  [ -n "$port" ] || sleep 0.2
done
echo "{SERIAL_BANNER}" >/dev/ttyS0
exec /usr/sbin/qemu-ga -m virtio-serial -p "$port" -t /run -f /run/qemu-ga.pid
"""

_SHUTDOWN = """#!/bin/sh
# qemu-ga's guest-shutdown runs /sbin/shutdown -h -P +0 "..." (or -r for a reboot).
case " $* " in
  *" -r "*) exec /bin/reboot ;;
  *) exec /bin/poweroff ;;
esac
"""

_POWER_BUTTON = """#!/bin/sh
exec /bin/poweroff
"""

_OS_RELEASE = """PRETTY_NAME="deskpool test guest (Debian 12)"
NAME="deskpool test guest"
ID=debian
VERSION_ID="12"
VERSION="12 (bookworm)"
"""


@dataclass(frozen=True)
class GuestImage:
    """A built guest: its kernel, its initramfs and the command line to boot them with."""

    kernel: Path
    initrd: Path
    cmdline: str = KERNEL_CMDLINE


def guest_cache() -> Path:
    """The parent folder of built guests (``DESKPOOL_GUEST_CACHE`` or ``/var/tmp``'s)."""
    return Path(os.environ.get("DESKPOOL_GUEST_CACHE", "/var/tmp/deskpool-guest"))


def _run(*args: str, cwd: Path | None = None) -> str:
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"{' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def _candidate(package: str) -> str:
    policy = _run("apt-cache", "policy", package)
    match = re.search(r"Candidate:\s*(\S+)", policy)
    if not match or match.group(1) == "(none)":
        raise RuntimeError(
            f"apt has no {package}: run apt-get update (the guest is built from Debian packages)"
        )
    return match.group(1)


def _kernel_package() -> str:
    depends = _run("apt-cache", "depends", _KERNEL_PACKAGE)
    match = re.search(r"Depends:\s*(linux-image-\S+)", depends)
    if not match:
        raise RuntimeError(f"cannot tell which kernel {_KERNEL_PACKAGE} depends on")
    return match.group(1)


def _recipe() -> tuple[str, list[str]]:
    """The recipe's hash (this module and the package versions) and the packages."""
    packages = [_kernel_package(), *_PACKAGES]
    digest = hashlib.sha256(Path(__file__).read_bytes())
    for package in packages:
        digest.update(f"{package}={_candidate(package)}\n".encode())
    return digest.hexdigest()[:16], packages


def _module_depends(path: Path) -> list[str]:
    match = re.search(rb"depends=([A-Za-z0-9_,-]*)\x00", path.read_bytes())
    return [d for d in match.group(1).decode().split(",") if d] if match else []


def _module_order(modules_root: Path) -> list[Path]:
    """Every module of :data:`_MODULES` and its dependencies, dependencies first."""
    by_name = {p.name[: -len(".ko")].replace("-", "_"): p for p in modules_root.rglob("*.ko")}
    order: list[Path] = []

    def add(name: str) -> None:
        path = by_name.get(name.replace("-", "_"))
        if path is None or path in order:
            return  # built into the kernel, or already there
        for dependency in _module_depends(path):
            add(dependency)
        order.append(path)

    for module in _MODULES:
        add(module)
    return order


def _shared_libraries(binary: Path) -> list[Path]:
    """The shared libraries ``binary`` needs, as the host's loader resolves them."""
    found: list[Path] = []
    for line in _run("ldd", str(binary)).splitlines():
        if "not found" in line:
            raise RuntimeError(f"{binary.name} needs a library the host lacks: {line.strip()}")
        match = re.search(r"(/\S+)\s+\(0x", line)
        if match:
            found.append(Path(match.group(1)))
    return found


def _cpio_newc(root: Path, out: Path) -> None:
    """Write ``root`` as an uncompressed ``newc`` cpio archive (what the kernel unpacks)."""
    entries = sorted(root.rglob("*"))
    with out.open("wb") as archive:
        inode = 1
        for path in [root, *entries]:
            name = "." if path == root else str(path.relative_to(root))
            info = path.lstat()
            if path.is_symlink():
                data = os.readlink(path).encode()
            elif path.is_file():
                data = path.read_bytes()
            else:
                data = b""
            fields = [inode, info.st_mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(name) + 1, 0]
            header = b"070701" + b"".join(f"{f:08x}".encode() for f in fields)
            archive.write(header + name.encode() + b"\x00")
            archive.write(b"\x00" * (-(110 + len(name) + 1) % 4))
            archive.write(data + b"\x00" * (-len(data) % 4))
            inode += 1
        trailer = "TRAILER!!!"
        fields = [0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, len(trailer) + 1, 0]
        archive.write(b"070701" + b"".join(f"{f:08x}".encode() for f in fields))
        archive.write(trailer.encode() + b"\x00")
        archive.write(b"\x00" * (-(110 + len(trailer) + 1) % 4))


def _write(path: Path, text: str, mode: int = 0o755) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def _assemble(work: Path, packages: list[str], out: Path) -> None:
    debs = work / "debs"
    debs.mkdir()
    _run("apt-get", "download", "-q", *packages, cwd=debs)
    extracted = work / "extracted"
    for deb in debs.glob("*.deb"):
        _run("dpkg-deb", "-x", str(deb), str(extracted))
    kernel = next(extracted.glob("boot/vmlinuz-*"))
    modules_root = next(extracted.glob("lib/modules/*"))

    root = work / "root"
    for folder in ("bin", "sbin", "usr/sbin", "etc/acpi/PWRF", "proc", "sys", "dev", "run", "tmp"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    (root / "var").mkdir()
    (root / "var/run").symlink_to("../run")
    shutil.copy2(extracted / "bin/busybox", root / "bin/busybox")
    agent = extracted / "usr/sbin/qemu-ga"
    shutil.copy2(agent, root / "usr/sbin/qemu-ga")
    for library in _shared_libraries(agent):
        target = root / library.relative_to("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(library.resolve(), target)
    lib64 = root / "lib64"
    if (root / "lib/x86_64-linux-gnu").exists() and not lib64.exists():
        lib64.mkdir()
        loader = root / "lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"
        if loader.exists():
            shutil.copy2(loader, lib64 / loader.name)
    order = []
    for module in _module_order(modules_root):
        relative = module.relative_to(modules_root)
        target = root / "lib/modules" / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(module, target)
        order.append(str(relative))
    _write(root / "etc/modules-order", "\n".join(order) + "\n", 0o644)
    _write(root / "init", _INIT)
    _write(root / "etc/inittab", _INITTAB, 0o644)
    _write(root / "etc/rc.screen", _SCREEN)
    _write(root / "etc/rc.agent", _AGENT)
    _write(root / "sbin/shutdown", _SHUTDOWN)
    _write(root / "etc/acpi/PWRF/00000080", _POWER_BUTTON)
    _write(root / "etc/acpid.conf", "PWRF PWRF/00000080\n", 0o644)
    _write(root / "etc/os-release", _OS_RELEASE, 0o644)
    _write(root / "etc/hostname", "deskpool-guest\n", 0o644)
    _write(root / "etc/passwd", "root:x:0:0:root:/:/bin/sh\n", 0o644)
    _write(root / "etc/group", "root:x:0:\n", 0o644)

    out.mkdir()
    shutil.copy2(kernel, out / "vmlinuz")
    raw = work / "initrd.cpio"
    _cpio_newc(root, raw)
    with raw.open("rb") as plain, (out / "initrd.img").open("wb") as packed:
        subprocess.run(["gzip", "-6", "-c"], stdin=plain, stdout=packed, check=True)
    (out / "cmdline").write_text(KERNEL_CMDLINE + "\n")


def build_guest() -> GuestImage:
    """The test guest, built now unless the cache already holds this recipe's.

    :raises RuntimeError: a package cannot be found or extracted (the message says why).
    """
    digest, packages = _recipe()
    cache = guest_cache()
    folder = cache / digest
    if not (folder / "initrd.img").exists():
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="build-", dir=cache) as work:
            built = Path(work) / "guest"
            _assemble(Path(work), packages, built)
            for path in [built, *built.iterdir()]:
                path.chmod(0o755 if path.is_dir() else 0o644)
            try:
                built.rename(folder)
            except OSError:
                if not (folder / "initrd.img").exists():  # not a concurrent builder's
                    raise
    return GuestImage(kernel=folder / "vmlinuz", initrd=folder / "initrd.img")


if __name__ == "__main__":
    guest = build_guest()
    print(guest.kernel.parent)
