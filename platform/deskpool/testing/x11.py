"""Real X and VNC servers for tests: Xvfb, x11vnc, xterm, and ``xwd`` screenshots.

:func:`x_display` starts Xvfb on a display it picks itself (``-displayfd``), paints the root
window a solid colour, and stops it on exit; :meth:`XDisplay.spawn` runs an X client on it
(an ``xterm``...) and :meth:`XDisplay.screenshot` reads the screen with ``xwd``;
:meth:`XDisplay.clipboard` and :meth:`XDisplay.set_clipboard` read and set its CLIPBOARD
selection with ``xclip``.
:func:`vnc_server` serves a display with x11vnc on a loopback port it picks, with or without a VNC
password. A missing program is a failing test that says what to install (``make x11``, which
runs ``scripts/ensure-x11.sh``), never a skip.

Example::

    async with x_display() as display, vnc_server(display, password="s3cret") as vnc:
        ...  # a VNC client at 127.0.0.1:vnc.port shows display.screenshot()
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import struct
import subprocess
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

from PIL import Image

from deskpool.testing.processes import START_WITHIN, until

__all__ = ["VncServer", "XDisplay", "require_x11", "vnc_server", "x_display"]

#: The programs the X tests run, and the Debian package of each.
PACKAGES = {
    "Xvfb": "xvfb",
    "x11vnc": "x11vnc",
    "xterm": "xterm",
    "xwd": "x11-apps",
    "xsetroot": "x11-xserver-utils",
    "xwininfo": "x11-utils",
    "xclip": "xclip",
}
#: The first port x11vnc tries (it takes the first free one from there). Not 5900, x11vnc's
#: own default: libvirt gives its VMs' VNC displays the first free port from 5900 and qemu
#: binds it a moment later, so an x11vnc of a test running beside a libvirt test took the
#: port a VM had been given ("-vnc 127.0.0.1:3: Failed to find an available port").
VNC_PORTS_FROM = 15900

#: The root window's colour on every display started here.
ROOT_COLOUR = (0x33, 0x66, 0xCC)


def require_x11() -> None:
    """Fail (never skip) when a program of :data:`PACKAGES` is missing, saying how to install it.

    :raises AssertionError: naming the missing programs and their packages.
    """
    missing = [program for program in PACKAGES if shutil.which(program) is None]
    if missing:
        packages = " ".join(sorted({PACKAGES[program] for program in missing}))
        raise AssertionError(
            f"{', '.join(missing)} not installed: run `make x11` (scripts/ensure-x11.sh) "
            f"or `sudo apt-get install {packages}`"
        )


@dataclass
class XDisplay:
    """A running Xvfb: ``DISPLAY`` is ``:number``."""

    number: int
    process: asyncio.subprocess.Process
    clients: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def name(self) -> str:
        """``:number``."""
        return f":{self.number}"

    @property
    def env(self) -> dict[str, str]:
        """This process's environment with ``DISPLAY`` set to this display."""
        return {**os.environ, "DISPLAY": self.name}

    def spawn(self, *argv: str) -> subprocess.Popen[bytes]:
        """Start an X client on this display (stopped with the display)."""
        client = subprocess.Popen(
            argv, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self.clients.append(client)
        return client

    async def run(self, *argv: str) -> bytes:
        """Run an X client to completion; its standard output.

        :raises AssertionError: it exits with a failure.
        """
        process = await asyncio.create_subprocess_exec(
            *argv, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        out, err = await process.communicate()
        assert process.returncode == 0, f"{argv[0]} failed: {err.decode(errors='replace')}"
        return out

    async def clipboard(self) -> str:
        """The X CLIPBOARD selection's text (``xclip``); empty when nobody owns it."""
        process = await asyncio.create_subprocess_exec(
            "xclip", "-selection", "clipboard", "-o",
            env=self.env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        out, _ = await process.communicate()
        return out.decode(errors="replace") if process.returncode == 0 else ""

    async def set_clipboard(self, text: str) -> None:
        """Own the X CLIPBOARD selection with ``text`` (``xclip`` keeps serving it)."""
        process = await asyncio.create_subprocess_exec(
            "xclip", "-selection", "clipboard", "-i",
            env=self.env, stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        await process.communicate(text.encode())
        assert process.returncode == 0, "xclip could not take the clipboard"

    async def screenshot(self) -> Image.Image:
        """The whole screen as ``xwd -root`` reads it, as an RGB image."""
        return read_xwd(await self.run("xwd", "-root", "-silent"))


def read_xwd(data: bytes) -> Image.Image:
    """An RGB image from an XWD file of a TrueColor ZPixmap with 32 bits per pixel.

    :raises AssertionError: the dump has another layout (Xvfb's ``-screen 0 WxHx24`` gives
        this one).
    """
    fields = struct.unpack(">25I", data[:100])
    header_size, _, pixmap_format, _, width, height = fields[:6]
    byte_order, bits_per_pixel, bytes_per_line = fields[7], fields[11], fields[12]
    red_mask, ncolors = fields[14], fields[19]
    assert pixmap_format == 2, "xwd: not a ZPixmap"
    assert bits_per_pixel == 32, f"xwd: {bits_per_pixel} bits per pixel"
    assert red_mask == 0xFF0000, f"xwd: red mask {red_mask:#x}"
    start = header_size + 12 * ncolors
    raw = data[start : start + bytes_per_line * height]
    mode = "BGRX" if byte_order == 0 else "XRGB"
    return Image.frombuffer("RGB", (width, height), raw, "raw", mode, bytes_per_line, 1)


@contextlib.asynccontextmanager
async def x_display(width: int = 640, height: int = 480) -> AsyncIterator[XDisplay]:
    """Xvfb on a display it picks, its root window painted :data:`ROOT_COLOUR`; stopped on exit."""
    require_x11()
    read_end, write_end = os.pipe()
    process = await asyncio.create_subprocess_exec(
        "Xvfb", "-displayfd", str(write_end), "-screen", "0", f"{width}x{height}x24",
        "-nolisten", "tcp", "-noreset",
        pass_fds=(write_end,),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    os.close(write_end)
    try:
        with os.fdopen(read_end, "rb") as pipe:
            line = await asyncio.wait_for(asyncio.to_thread(pipe.readline), 30)
        assert line.strip(), "Xvfb exited before it chose a display"
        display = XDisplay(int(line), process)
        try:
            red, green, blue = ROOT_COLOUR
            await display.run("xsetroot", "-solid", f"#{red:02x}{green:02x}{blue:02x}")
            yield display
        finally:
            for client in display.clients:
                client.kill()
                await asyncio.to_thread(client.wait)
    finally:
        if process.returncode is None:
            process.terminate()
            await process.wait()


@dataclass(frozen=True)
class VncServer:
    """x11vnc serving a display at ``127.0.0.1:port``."""

    port: int
    process: asyncio.subprocess.Process


@contextlib.asynccontextmanager
async def vnc_server(
    display: XDisplay, password: str | None = None, *, rfb_version: str = "3.8"
) -> AsyncIterator[VncServer]:
    """x11vnc for ``display`` on a loopback port it binds itself (VNC Authentication: ``password``).

    ``rfb_version`` is the protocol version it announces (``3.3``, ``3.7`` or ``3.8``).

    It shares the screen with every viewer, draws no cursor into the framebuffer (so the
    picture equals ``xwd``'s), polls the screen (no XDAMAGE, no shared memory), and stays up
    after viewers leave. It carries the clipboard: a viewer's cut text becomes the X PRIMARY
    and CLIPBOARD selections at once; the selections reach viewers as ServerCutText, from
    about 15 s after a viewer connected (x11vnc's own wait, ``sel_waittime``, which no option
    changes). A Guacamole user of the VNC bridge waiting for it must send ``nop`` meanwhile, as
    guacamole-common-js does every 5 s: the bridge, as guacd, drops a user silent for 15 s.
    """
    auth = ["-passwdfile", f"rm:{_password_file(password)}"] if password else ["-nopw"]
    # x11vnc binds the first free port from VNC_PORTS_FROM itself and prints PORT=N.
    process = await asyncio.create_subprocess_exec(
        "x11vnc", "-display", display.name, "-localhost", "-autoport", str(VNC_PORTS_FROM),
        "-forever",
        "-shared", "-nocursor", "-noxdamage", "-noshm", "-quiet", "-rfbversion", rfb_version,
        *auth,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        # x11vnc creates the window that owns the selections only once it guesses a display
        # manager is gone (45 s after the first viewer); "never" avoids no windows at once.
        env={**os.environ, "X11VNC_AVOID_WINDOWS": "never"},
    )  # fmt: skip
    draining: asyncio.Task[bytes] | None = None
    try:
        assert process.stdout is not None
        port = 0
        async with asyncio.timeout(START_WITHIN):
            while not port:
                line = (await process.stdout.readline()).decode()
                assert line, "x11vnc exited before it said which port it bound"
                if line.startswith("PORT="):
                    port = int(line.removeprefix("PORT=").strip())
        draining = asyncio.create_task(process.stdout.read())

        async def listening() -> bool:
            assert process.returncode is None, "x11vnc exited before it listened"
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                return False
            writer.close()
            return True

        await until(
            listening, f"x11vnc listens on 127.0.0.1:{port}", seconds=START_WITHIN, every=0.1
        )
        yield VncServer(port, process)
    finally:
        # x11vnc can take 10 s to honour SIGTERM after a refused password; it holds nothing
        # worth a clean exit (no shared memory with -noshm).
        if process.returncode is None:
            process.kill()
            await process.wait()
        if draining is not None:
            await draining


def _password_file(password: str) -> Path:
    """A file x11vnc reads the password from (``rm:`` makes it delete the file once read)."""
    handle, path = tempfile.mkstemp(prefix="deskpool-vnc-")
    with os.fdopen(handle, "w") as file:
        file.write(password + "\n")
    return Path(path)
