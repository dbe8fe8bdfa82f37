"""A real rsyslog for the tests.

Its own configuration, a TCP input on a free port, every message written raw to a file in the
test's folder, run in the foreground (``-n``) with its own pid file.

``scripts/ensure-rsyslog.sh`` (``make rsyslog``, part of the test set-up) installs Debian's
package; nothing runs as a service.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

RSYSLOGD = shutil.which("rsyslogd") or "/usr/sbin/rsyslogd"

_CONFIG = """\
global(workDirectory="{work}" maxMessageSize="64k")
module(load="imtcp")
template(name="raw" type="string" string="%rawmsg%\\n")
input(type="imtcp" port="{port}" address="127.0.0.1")
action(type="omfile" file="{output}" template="raw" flushOnTXEnd="on" asyncWriting="off")
"""


def free_port() -> int:
    """A TCP port nobody listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class Rsyslog:
    """``with Rsyslog(tmp_path) as server``: rsyslogd listening on ``server.port``.

    :meth:`stop` and :meth:`start` restart it on the same port and file (a restart of the
    server); :meth:`lines` reads what it wrote.
    """

    def __init__(self, folder: Path) -> None:
        if not os.path.exists(RSYSLOGD):
            raise RuntimeError("rsyslogd is missing: run `make rsyslog` (Debian's rsyslog)")
        self.folder = folder
        self.port = free_port()
        self.output = folder / "syslog.out"
        self.work = folder / "rsyslog-work"
        self.work.mkdir(exist_ok=True)
        self.config = folder / "rsyslog.conf"
        self.config.write_text(_CONFIG.format(work=self.work, port=self.port, output=self.output))
        self.pid_file = folder / "rsyslogd.pid"
        self.log = folder / "rsyslogd.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start rsyslogd and wait until it accepts connections."""
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [RSYSLOGD, "-n", "-f", str(self.config), "-i", str(self.pid_file)],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"rsyslogd exited: {self.log.read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"rsyslogd did not listen: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        """Stop rsyslogd as a service manager does (SIGTERM), and wait for it."""
        if self.process is None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
        self.process = None

    def lines(self) -> list[str]:
        """The messages written so far, one a line."""
        if not self.output.exists():
            return []
        return [line for line in self.output.read_text(errors="replace").splitlines() if line]

    def event_ids(self) -> list[int]:
        """The audit event ids of the messages written, in the order written."""
        found = []
        for line in self.lines():
            match = re.search(r'\[deskpool@32473 id="(\d+)"', line)
            if match:
                found.append(int(match.group(1)))
        return found

    def __enter__(self) -> Rsyslog:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
