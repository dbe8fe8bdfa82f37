"""Connections to libvirt hosts, the event loop thread, and libvirt's errors as the contract's.

libvirt-python blocks: every call runs in the driver's thread pool (:class:`Hosts.run`), never
on the asyncio event loop. libvirt's own event loop (``virEventRegisterDefaultImpl``, needed
for domain lifecycle events and connection keep-alives) runs in one daemon thread per process
(:func:`ensure_event_loop`), registered before the first connection is opened.

Credentials: a SASL user name and password answer libvirt's authentication callback
(``virConnectOpenAuth``); an SSH key, a known_hosts text and a TLS client certificate and key
are written to a private folder (mode 0700, removed by :meth:`Hosts.close`) and passed as URI
parameters (``keyfile``, ``known_hosts``, ``pkipath``), as libvirt's remote driver reads them.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import libvirt

from deskpool_driver_api import (
    AgentNotRunning,
    AuthenticationFailed,
    ClusterUnreachable,
    DriverBusy,
    DriverError,
    NotFound,
    OperationFailed,
    PermissionDenied,
    TlsVerificationFailed,
    VmNotFound,
    VmNotRunning,
)

T = TypeVar("T")

_UNREACHABLE = {
    libvirt.VIR_ERR_NO_CONNECT,
    libvirt.VIR_ERR_INVALID_CONN,
    libvirt.VIR_ERR_SYSTEM_ERROR,
    libvirt.VIR_ERR_RPC,
}
_AUTH = {
    libvirt.VIR_ERR_AUTH_FAILED,
    libvirt.VIR_ERR_AUTH_CANCELLED,
    libvirt.VIR_ERR_AUTH_UNAVAILABLE,
}
_AGENT = {
    libvirt.VIR_ERR_AGENT_UNRESPONSIVE,
    libvirt.VIR_ERR_AGENT_UNSYNCED,
    libvirt.VIR_ERR_OPERATION_TIMEOUT,
}

_event_loop_lock = threading.Lock()
_event_loop_started = False


def _quiet(_context: object, _error: object) -> None:
    """libvirt's default handler prints every error to stderr; the driver raises them."""


def ensure_event_loop() -> None:
    """Register libvirt's default event loop and run it in a daemon thread (once per process).

    Events and keep-alives of a connection work only when the loop was registered before the
    connection was opened.
    """
    global _event_loop_started
    with _event_loop_lock:
        if _event_loop_started:
            return
        libvirt.registerErrorHandler(_quiet, None)
        libvirt.virEventRegisterDefaultImpl()

        def run() -> None:
            while True:
                libvirt.virEventRunDefaultImpl()

        threading.Thread(target=run, name="libvirt-events", daemon=True).start()
        _event_loop_started = True


def translate(error: libvirt.libvirtError, what: str, *, vm_id: str | None = None) -> DriverError:
    """The contract's error for libvirt's ``error`` while doing ``what``."""
    code = error.get_error_code()
    message = f"{what}: {error.get_error_message() or error}"
    if code == libvirt.VIR_ERR_NO_DOMAIN:
        return VmNotFound(message, vm_id=vm_id)
    if code in (libvirt.VIR_ERR_NO_STORAGE_POOL, libvirt.VIR_ERR_NO_STORAGE_VOL):
        return NotFound(message, vm_id=vm_id)
    if code in _AUTH:
        return AuthenticationFailed(message)
    if code in (libvirt.VIR_ERR_ACCESS_DENIED, libvirt.VIR_ERR_OPERATION_DENIED):
        return PermissionDenied(message, vm_id=vm_id)
    if code in _AGENT:
        return AgentNotRunning(message, vm_id=vm_id)
    if code in _UNREACHABLE:
        text = message.lower()
        if "certificate" in text or ("tls" in text and "handshake" in text):
            return TlsVerificationFailed(message)
        return ClusterUnreachable(message)
    if code == libvirt.VIR_ERR_OPERATION_INVALID and "not running" in message:
        return VmNotRunning(message, vm_id=vm_id)
    if code == libvirt.VIR_ERR_OPERATION_INVALID and "lock" in message:
        return DriverBusy(message, vm_id=vm_id)
    return OperationFailed(message, vm_id=vm_id)


def node_name(uri: str) -> str:
    """The node a host URI names: its host (and port, if given); ``localhost`` when local."""
    parts = urlsplit(uri)
    host = parts.hostname or "localhost"
    return f"{host}:{parts.port}" if parts.port else host


@dataclass(frozen=True)
class Credentials:
    """What a host's connection authenticates with (none of it ever shown)."""

    username: str | None = None
    password: str | None = None
    ssh_private_key: str | None = None
    ssh_known_hosts: str | None = None
    tls_client_cert: str | None = None
    tls_client_key: str | None = None
    ca_cert: str | None = None
    tls_verify: bool = True

    def __repr__(self) -> str:
        return "Credentials(<hidden>)"


LifecycleListener = Callable[[str, str, int, int], None]
"""``(node, domain uuid, event, detail)``, called in libvirt's event loop thread."""


class Hosts:
    """One lazily opened connection per host URI, and the thread pool that uses them.

    :param uris: the hosts, the first one the endpoint.
    :param credentials: how every host authenticates.
    :param listener: told of every domain lifecycle event of every host.
    """

    def __init__(
        self,
        uris: list[str],
        credentials: Credentials,
        listener: LifecycleListener | None = None,
    ) -> None:
        self.uris = uris
        self.nodes = {node_name(uri): uri for uri in uris}
        self._credentials = credentials
        self._listener = listener
        self._lock = threading.Lock()
        self._connections: dict[str, Any] = {}
        self._callbacks: dict[str, int] = {}
        self._folder: Path | None = None
        self._executor = ThreadPoolExecutor(max_workers=8, thread_name_prefix="libvirt-driver")
        self._closed = False

    async def run(self, call: Callable[[], T]) -> T:
        """Run the blocking ``call`` in the driver's threads; an asyncio cancel abandons it."""
        if self._closed:
            raise ClusterUnreachable("the libvirt driver was closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, call)

    # ------------------------------------------------------------------ connections (threads)

    def _private_folder(self) -> Path:
        if self._folder is None:
            self._folder = Path(tempfile.mkdtemp(prefix="deskpool-libvirt-"))
        return self._folder

    def _private_file(self, name: str, text: str) -> str:
        path = self._private_folder() / name
        if not path.exists():
            path.touch(mode=0o600)
            path.write_text(text if text.endswith("\n") else text + "\n")
        return str(path)

    def connection_uri(self, uri: str) -> str:
        """``uri`` with the parameters pointing at the credentials' files."""
        parts = urlsplit(uri)
        transport = parts.scheme.partition("+")[2]
        params = dict(parse_qsl(parts.query))
        credentials = self._credentials
        if transport in ("ssh", "libssh", "libssh2"):
            if credentials.ssh_private_key:
                params.setdefault(
                    "keyfile", self._private_file("id_key", credentials.ssh_private_key)
                )
            if credentials.ssh_known_hosts:
                params.setdefault(
                    "known_hosts", self._private_file("known_hosts", credentials.ssh_known_hosts)
                )
            params.setdefault("no_tty", "1")
        if transport == "tls":
            folder = self._private_folder() / "pki"
            if not folder.exists():
                folder.mkdir(mode=0o700)
                if credentials.tls_client_cert:
                    (folder / "clientcert.pem").write_text(credentials.tls_client_cert)
                if credentials.tls_client_key:
                    key = folder / "clientkey.pem"
                    key.touch(mode=0o600)
                    key.write_text(credentials.tls_client_key)
                if credentials.ca_cert:
                    (folder / "cacert.pem").write_text(credentials.ca_cert)
            params.setdefault("pkipath", str(folder))
            if not credentials.tls_verify:
                params.setdefault("no_verify", "1")
        return urlunsplit(parts._replace(query=urlencode(params)))

    def _open(self, uri: str) -> Any:
        ensure_event_loop()
        credentials = self._credentials
        target = self.connection_uri(uri)

        def answer(asked: list[list[Any]], _opaque: object) -> int:
            for credential in asked:
                if credential[0] == libvirt.VIR_CRED_AUTHNAME:
                    credential[4] = credentials.username or ""
                elif credential[0] == libvirt.VIR_CRED_PASSPHRASE:
                    credential[4] = credentials.password or ""
                else:
                    return -1
            return 0

        try:
            connection = libvirt.openAuth(
                target,
                [[libvirt.VIR_CRED_AUTHNAME, libvirt.VIR_CRED_PASSPHRASE], answer, None],
                0,
            )
        except libvirt.libvirtError as error:
            raise translate(error, f"connecting to {node_name(uri)}") from None
        if urlsplit(uri).hostname:
            with contextlib.suppress(libvirt.libvirtError):
                connection.setKeepAlive(5, 3)
        if self._listener is not None:
            node = node_name(uri)
            listener = self._listener

            def lifecycle(
                _conn: object, domain: Any, event: int, detail: int, _opaque: object
            ) -> None:
                listener(node, domain.UUIDString(), event, detail)

            # A host without events is still usable: the periodic pass notices its changes.
            with contextlib.suppress(libvirt.libvirtError):
                self._callbacks[uri] = connection.domainEventRegisterAny(
                    None, libvirt.VIR_DOMAIN_EVENT_ID_LIFECYCLE, lifecycle, None
                )
        return connection

    def connection(self, uri: str) -> Any:
        """The open connection to ``uri``, opened (again) if needed. Runs in a thread."""
        with self._lock:
            if self._closed:
                raise ClusterUnreachable("the libvirt driver was closed")
            connection = self._connections.get(uri)
            if connection is not None:
                try:
                    alive = connection.isAlive()
                except libvirt.libvirtError:
                    alive = False
                if alive:
                    return connection
                self._drop(uri)
            connection = self._open(uri)
            self._connections[uri] = connection
            return connection

    def forget(self, uri: str) -> None:
        """Drop the connection to ``uri`` (it broke); the next call opens a new one."""
        with self._lock:
            self._drop(uri)

    def _drop(self, uri: str) -> None:
        connection = self._connections.pop(uri, None)
        callback = self._callbacks.pop(uri, None)
        if connection is None:
            return
        with contextlib.suppress(libvirt.libvirtError):
            if callback is not None:
                connection.domainEventDeregisterAny(callback)
        with contextlib.suppress(libvirt.libvirtError):
            connection.close()

    def _close_all(self) -> None:
        with self._lock:
            self._closed = True
            for uri in list(self._connections):
                self._drop(uri)
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None

    async def close(self) -> None:
        """Close every connection, remove the credentials' files, stop the threads."""
        if self._closed:
            return
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._close_all)
        self._executor.shutdown(wait=False, cancel_futures=True)


def options_hosts(endpoint: str, options: Mapping[str, Any]) -> list[str]:
    """The host URIs of a connection: the endpoint, then the ``hosts`` option's."""
    hosts = [endpoint, *[str(uri) for uri in options.get("hosts") or ()]]
    unique: list[str] = []
    for uri in hosts:
        if uri not in unique:
            unique.append(uri)
    return unique
