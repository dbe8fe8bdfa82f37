"""A small asyncio client of the Proxmox VE REST API (``https://HOST:8006/api2/json``).

What it speaks, as ``pveproxy`` does:

- authentication with an API token: ``Authorization: PVEAPIToken=USER@REALM!TOKENID=SECRET``
  (no ticket, no CSRF token needed);
- ``GET`` and ``DELETE`` parameters in the query string, ``POST`` and ``PUT`` parameters
  form-encoded (``application/x-www-form-urlencoded``), booleans as ``0``/``1``;
- every answer wrapped as ``{"data": ...}``; errors as described in
  :mod:`deskpool_driver_proxmox.errors`;
- long operations return a task id (UPID, ``UPID:node:pid:pstart:starttime:type:id:user:``),
  polled at ``/nodes/{node}/tasks/{upid}/status`` until ``status`` is ``stopped``; the task
  succeeded when ``exitstatus`` is ``OK``.

TLS is verified by default against the system CAs, or against one CA certificate (PEM), or
by pinning the SHA-256 fingerprint of the server certificate (Proxmox VE's self-signed
certificate is the common case); verification can be turned off only explicitly.
"""

from __future__ import annotations

import asyncio
import json
import re
import ssl
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlsplit

import aiohttp

from deskpool_driver_api import (
    ClusterConnection,
    ClusterUnreachable,
    DriverConfigurationError,
    DriverTimeout,
    TlsVerificationFailed,
)
from deskpool_driver_proxmox.errors import error_for_message, error_for_response

DEFAULT_PORT = 8006
API_PATH = "/api2/json"

_TOKEN_ID = re.compile(r"[^\s@!=]+@[^\s@!=]+![A-Za-z][A-Za-z0-9._-]*")
_UPID = re.compile(r"UPID:([^:]+):")

Params = Mapping[str, str | int | bool | None]


def api_base_url(endpoint: str) -> str:
    """The API base URL for a connection endpoint.

    Accepts ``pve1.example.com``, ``pve1.example.com:8006``, ``https://pve1.example.com``
    and full URLs ending in ``/api2/json``; the port defaults to 8006. ``http`` is accepted
    (a test fake), any other scheme is not.

    :raises DriverConfigurationError: the endpoint cannot be read.
    """
    text = endpoint.strip()
    if "://" not in text:
        text = f"https://{text}"
    parts = urlsplit(text)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise DriverConfigurationError(f"invalid Proxmox VE endpoint {endpoint!r}")
    if parts.path not in ("", "/", API_PATH, API_PATH + "/"):
        raise DriverConfigurationError(
            f"invalid Proxmox VE endpoint {endpoint!r}: give the host (and port) only"
        )
    try:
        port = parts.port or DEFAULT_PORT
    except ValueError:
        raise DriverConfigurationError(f"invalid port in endpoint {endpoint!r}") from None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{parts.scheme}://{host}:{port}{API_PATH}"


def token_header(credentials: Mapping[str, str]) -> str:
    """The ``Authorization`` header value for the API token in ``credentials``.

    ``credentials`` holds ``token_id`` (``USER@REALM!TOKENID``) and ``token_secret``.

    :raises DriverConfigurationError: either is missing or malformed (without showing the
        secret).
    """
    token_id = credentials.get("token_id", "").strip()
    secret = credentials.get("token_secret", "").strip()
    if not _TOKEN_ID.fullmatch(token_id):
        raise DriverConfigurationError(
            "credentials.token_id must be an API token id such as deskpool@pve!deskpool"
        )
    if not secret or any(char.isspace() for char in secret):
        raise DriverConfigurationError("credentials.token_secret is missing or malformed")
    return f"PVEAPIToken={token_id}={secret}"


def ssl_setting(connection: ClusterConnection) -> ssl.SSLContext | aiohttp.Fingerprint | bool:
    """What aiohttp's ``ssl=`` gets for this connection's TLS settings.

    A fingerprint pins the server certificate (its chain is then not checked); otherwise a
    CA certificate replaces the system CAs; ``tls_verify=False`` turns checks off.

    :raises DriverConfigurationError: the fingerprint is not 32 hex bytes or the CA
        certificate cannot be read.
    """
    if connection.fingerprint:
        digest = connection.fingerprint.replace(":", "").replace(" ", "").strip()
        try:
            raw = bytes.fromhex(digest)
        except ValueError:
            raw = b""
        if len(raw) != 32:
            raise DriverConfigurationError(
                "fingerprint must be the SHA-256 fingerprint of the server certificate "
                "(64 hex digits, colons allowed)"
            )
        return aiohttp.Fingerprint(raw)
    if not connection.tls_verify:
        return False
    if connection.ca_cert:
        try:
            return ssl.create_default_context(cadata=connection.ca_cert)
        except (ssl.SSLError, ValueError) as error:
            raise DriverConfigurationError(f"ca_cert is not a PEM certificate: {error}") from None
    return True


def node_of_upid(upid: str) -> str:
    """The node a task runs on, read from its UPID.

    :raises ValueError: not a UPID.
    """
    match = _UPID.match(upid)
    if not match:
        raise ValueError(f"not a Proxmox VE task id: {upid!r}")
    return match.group(1)


def task_succeeded(exit_status: str) -> bool:
    """Whether a stopped task's ``exitstatus`` means success (``OK`` or ``WARNINGS: n``)."""
    return exit_status == "OK" or exit_status.startswith("WARNINGS")


def _form(params: Params | None) -> dict[str, str] | None:
    if params is None:
        return None
    out = {}
    for key, value in params.items():
        if value is None:
            continue
        out[key] = ("1" if value else "0") if isinstance(value, bool) else str(value)
    return out


class ProxmoxClient:
    """Authenticated requests to one Proxmox VE cluster.

    :param base_url: from :func:`api_base_url`.
    :param authorization: from :func:`token_header` (kept private, never logged).
    :param ssl: from :func:`ssl_setting`.
    :param request_timeout: seconds one HTTP request may take.
    :param poll_interval: seconds between task status polls.
    """

    def __init__(
        self,
        base_url: str,
        authorization: str,
        *,
        ssl: ssl.SSLContext | aiohttp.Fingerprint | bool = True,
        request_timeout: float = 30.0,
        poll_interval: float = 1.0,
    ) -> None:
        self.base_url = base_url
        self._authorization = authorization
        self._ssl = ssl
        self._timeout = aiohttp.ClientTimeout(total=request_timeout)
        self.poll_interval = poll_interval
        self._session: aiohttp.ClientSession | None = None

    def __repr__(self) -> str:
        return f"<ProxmoxClient {self.base_url}>"

    def _client_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                headers={"Authorization": self._authorization, "Accept": "application/json"},
                timeout=self._timeout,
            )
        return self._session

    async def close(self) -> None:
        """Close the HTTP session."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def request(
        self,
        method: str,
        path: str,
        params: Params | None = None,
        *,
        vm_id: str | None = None,
    ) -> Any:
        """Call the API and return the ``data`` member of the answer.

        :param path: below ``/api2/json`` (``/nodes/pve1/qemu/100/config``).
        :param params: query parameters (GET, DELETE) or form fields (POST, PUT).
        :param vm_id: the VM concerned, so "does not exist" becomes :class:`VmNotFound`.
        :raises DriverError: the mapped error.
        """
        session = self._client_session()
        in_query = method in ("GET", "DELETE")
        url = self.base_url + path
        try:
            async with session.request(
                method,
                url,
                params=_form(params) if in_query else None,
                data=None if in_query else (_form(params) or {}),
                ssl=self._ssl,
            ) as response:
                body = await response.text()
                if response.status >= 400:
                    raise error_for_response(
                        response.status, response.reason or "", body, vm_id=vm_id
                    )
        except (aiohttp.ServerFingerprintMismatch, aiohttp.ClientConnectorCertificateError) as e:
            raise TlsVerificationFailed(f"{self.base_url}: {e}") from None
        except aiohttp.ClientSSLError as error:
            raise TlsVerificationFailed(f"TLS with {self.base_url} failed: {error}") from None
        except aiohttp.ClientConnectionError as error:
            raise ClusterUnreachable(f"{self.base_url} does not answer: {error}") from None
        except aiohttp.ClientError as error:
            raise ClusterUnreachable(f"talking to {self.base_url} failed: {error}") from None
        except TimeoutError:
            raise DriverTimeout(f"{method} {path} got no answer in time") from None
        try:
            document = json.loads(body) if body else {}
        except ValueError:
            raise ClusterUnreachable(f"{method} {path} answered something not JSON") from None
        return document.get("data") if isinstance(document, dict) else None

    async def get(
        self, path: str, params: Params | None = None, *, vm_id: str | None = None
    ) -> Any:
        """``GET`` ``path``."""
        return await self.request("GET", path, params, vm_id=vm_id)

    async def post(
        self, path: str, params: Params | None = None, *, vm_id: str | None = None
    ) -> Any:
        """``POST`` ``path`` with form-encoded ``params``."""
        return await self.request("POST", path, params, vm_id=vm_id)

    async def put(
        self, path: str, params: Params | None = None, *, vm_id: str | None = None
    ) -> Any:
        """``PUT`` ``path`` with form-encoded ``params``."""
        return await self.request("PUT", path, params, vm_id=vm_id)

    async def delete(
        self, path: str, params: Params | None = None, *, vm_id: str | None = None
    ) -> Any:
        """``DELETE`` ``path``."""
        return await self.request("DELETE", path, params, vm_id=vm_id)

    async def task_status(self, upid: str) -> dict[str, Any]:
        """The status of task ``upid`` (``status``, ``exitstatus``...)."""
        node = node_of_upid(upid)
        data = await self.get(f"/nodes/{quote(node, safe='')}/tasks/{quote(upid, safe='')}/status")
        return data if isinstance(data, dict) else {}

    async def wait_task(self, upid: str, *, vm_id: str | None = None) -> None:
        """Poll task ``upid`` until it stops; return if it succeeded.

        Cancelling the wait does not stop the task on the cluster.

        :raises DriverError: mapped from the task's ``exitstatus`` when it failed.
        """
        while True:
            status = await self.task_status(upid)
            if status.get("status") == "stopped":
                exit_status = str(status.get("exitstatus", ""))
                if task_succeeded(exit_status):
                    return
                raise error_for_message(
                    f"task {status.get('type', '')} failed: {exit_status}", vm_id=vm_id
                )
            await asyncio.sleep(self.poll_interval)
