"""The fake Proxmox VE API served over HTTP: authentication, routing, parameters, errors."""

from __future__ import annotations

import asyncio
import hmac
import re
import ssl
from collections.abc import Callable
from typing import Any

from aiohttp import web

from deskpool_driver_proxmox.testing.model import (
    CLONE_PARAMS,
    CONFIG_PARAMS,
    DEFAULT_VERSION,
    ApiCall,
    ApiError,
    ApiMethod,
    FakeTimings,
    RecordedRequest,
    as_text,
    error_response,
    validate,
)
from deskpool_driver_proxmox.testing.vms import FakeVmApi


class FakeProxmox(FakeVmApi):
    """A running fake Proxmox VE cluster.

    :param nodes: node names (the first is the one the API is reached through).
    :param timings: how long operations take.
    :param ssl_context: serve HTTPS with it (else plain HTTP).
    :param version: the Proxmox VE version reported.

    Use as ``async with FakeProxmox() as fake:``; :attr:`endpoint` is then the URL to give a
    connection, and :data:`TOKEN_ID` / :data:`TOKEN_SECRET` a valid token.
    """

    def __init__(
        self,
        nodes: tuple[str, ...] = ("pve1", "pve2"),
        *,
        timings: FakeTimings | None = None,
        ssl_context: ssl.SSLContext | None = None,
        version: str = DEFAULT_VERSION,
    ) -> None:
        super().__init__(nodes, timings=timings, version=version)
        self.requests: list[RecordedRequest] = []
        self._ssl = ssl_context
        self._runner: web.AppRunner | None = None
        self._request_seen = asyncio.Condition()
        self.endpoint = ""

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> str:
        """Listen on 127.0.0.1 (a free port) and return :attr:`endpoint`."""
        app = web.Application(middlewares=[self._middleware])
        app.router.add_route("*", "/api2/json/{path:.*}", self._dispatch)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=self._ssl)
        await site.start()
        port = self._runner.addresses[0][1]
        self.endpoint = f"{'https' if self._ssl else 'http'}://127.0.0.1:{port}"
        return self.endpoint

    async def close(self) -> None:
        """Stop running tasks and the server."""
        for task in self.tasks.values():
            if task.runner is not None and not task.runner.done():
                task.runner.cancel()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeProxmox:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def request_seen(self, matches: Callable[[RecordedRequest], bool]) -> RecordedRequest:
        """Wait until a request that ``matches`` has been received (at once if one has)."""
        async with self._request_seen:
            await self._request_seen.wait_for(lambda: any(map(matches, self.requests)))
        return next(request for request in self.requests if matches(request))

    # ------------------------------------------------------------------ plumbing

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            response: web.StreamResponse = await handler(request)
        except ApiError as error:
            return error_response(error)
        return response

    def _authenticate(self, request: web.Request) -> tuple[str, frozenset[str]]:
        header = request.headers.get("Authorization", "")
        match = re.fullmatch(r"PVEAPIToken\s*=?\s*([^=\s]+)=(\S+)", header.strip())
        if match is None:
            raise ApiError(401, "No ticket")
        token_id, secret = match.groups()
        token = self.tokens.get(token_id)
        if token is None or not hmac.compare_digest(token.secret.encode(), secret.encode()):
            raise ApiError(401, "invalid token value!")
        return token_id, token.privileges

    async def _dispatch(self, request: web.Request) -> web.Response:
        path = "/" + request.match_info["path"].rstrip("/")
        if request.method in ("GET", "DELETE") and request.content_length:
            raise ApiError(501, f"Unexpected content for method '{request.method}'")
        params = dict(request.query)
        content_type = request.content_type
        if request.method in ("POST", "PUT") and request.can_read_body:
            if content_type == "application/json":
                body = await request.json()
                params.update({k: as_text(v) for k, v in (body or {}).items()})
            else:
                form = await request.post()
                params.update({k: str(v) for k, v in form.items()})
        self.requests.append(RecordedRequest(request.method, path, content_type, dict(params)))
        async with self._request_seen:
            self._request_seen.notify_all()
        user, privileges = self._authenticate(request)
        method, path_params = self._route(request.method, path)
        node = path_params.get("node")
        if node is not None:
            if node not in self.nodes:
                raise ApiError(500, f"hostname lookup '{node}' failed - failed to get address info")
            if not self.nodes[node].online:
                raise ApiError(
                    595,
                    "Errors during connection establishment, proxy handler::__ANON__: "
                    "Connection refused",
                )
        for name, value in path_params.items():
            params.setdefault(name, value)
        validate(params, method)
        data = await method.handler(ApiCall(request, params, user, privileges))
        return web.json_response({"data": data})

    def _route(self, verb: str, path: str) -> tuple[ApiMethod, dict[str, str]]:
        for pattern, methods in self._table():
            match = pattern.fullmatch(path)
            if match is not None:
                if verb not in methods:
                    break
                return methods[verb], {k: v for k, v in match.groupdict().items() if v}
        raise ApiError(501, f"Method '{verb} {path}' not implemented")

    def _table(self) -> list[tuple[re.Pattern[str], dict[str, ApiMethod]]]:
        vm = r"/nodes/(?P<node>[^/]+)/qemu/(?P<vmid>[^/]+)"
        node_vmid = {"node": "node", "vmid": "vmid"}
        agent_get = {
            command: ApiMethod(self._agent_command(command), dict(node_vmid))
            for command in ("network-get-interfaces", "get-osinfo", "get-host-name")
        }
        return [
            (re.compile(r"/version"), {"GET": ApiMethod(self._version)}),
            (re.compile(r"/nodes"), {"GET": ApiMethod(self._nodes)}),
            (re.compile(r"/cluster/status"), {"GET": ApiMethod(self._cluster_status)}),
            (
                re.compile(r"/cluster/nextid"),
                {"GET": ApiMethod(self._nextid, {"vmid": "vmid"})},
            ),
            (
                re.compile(r"/cluster/resources"),
                {"GET": ApiMethod(self._resources, {"type": "resource-type"})},
            ),
            (
                re.compile(r"/nodes/(?P<node>[^/]+)/qemu"),
                {"GET": ApiMethod(self._vm_list, {"node": "node", "full": "bool"})},
            ),
            (
                re.compile(vm + "/config"),
                {
                    "GET": ApiMethod(self._config_get, {**node_vmid, "current": "bool"}),
                    "PUT": ApiMethod(self._config_put, CONFIG_PARAMS),
                    "POST": ApiMethod(self._config_post, CONFIG_PARAMS),
                },
            ),
            (
                re.compile(vm + "/clone"),
                {"POST": ApiMethod(self._clone, CLONE_PARAMS, frozenset({"newid"}))},
            ),
            (
                re.compile(vm + "/status/current"),
                {"GET": ApiMethod(self._status_current, dict(node_vmid))},
            ),
            (
                re.compile(vm + "/status/start"),
                {"POST": ApiMethod(self._start, {**node_vmid, "timeout": "int"})},
            ),
            (
                re.compile(vm + "/status/stop"),
                {"POST": ApiMethod(self._stop, {**node_vmid, "timeout": "int"})},
            ),
            (
                re.compile(vm + "/status/shutdown"),
                {
                    "POST": ApiMethod(
                        self._shutdown,
                        {**node_vmid, "timeout": "int", "forceStop": "bool", "keepActive": "bool"},
                    )
                },
            ),
            (re.compile(vm + "/status/reset"), {"POST": ApiMethod(self._reset, dict(node_vmid))}),
            (
                re.compile(vm + "/agent/ping"),
                {"POST": ApiMethod(self._agent_command("ping"), dict(node_vmid))},
            ),
            *(
                (re.compile(vm + f"/agent/{command}"), {"GET": method})
                for command, method in agent_get.items()
            ),
            (
                re.compile(vm + "/agent/file-read"),
                {
                    "GET": ApiMethod(
                        self._file_read,
                        {**node_vmid, "file": "string", "count": "int", "decode": "bool"},
                        frozenset({"file"}),
                    )
                },
            ),
            (
                re.compile(vm),
                {
                    "DELETE": ApiMethod(
                        self._destroy,
                        {
                            **node_vmid,
                            "purge": "bool",
                            "destroy-unreferenced-disks": "bool",
                            "skiplock": "bool",
                        },
                    )
                },
            ),
            (
                re.compile(r"/nodes/(?P<node>[^/]+)/tasks/(?P<upid>[^/]+)/status"),
                {"GET": ApiMethod(self._task_status, {"node": "node", "upid": "string"})},
            ),
            (
                re.compile(r"/nodes/(?P<node>[^/]+)/tasks/(?P<upid>[^/]+)"),
                {"DELETE": ApiMethod(self._task_stop, {"node": "node", "upid": "string"})},
            ),
        ]
