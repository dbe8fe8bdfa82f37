"""What a handler receives: the validated request of one API call."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiohttp import web

from deskpool.api.problems import REQUEST_ID_KEY

if TYPE_CHECKING:
    from deskpool.api.routes import Operation
    from deskpool.runtime import Runtime


@dataclass
class Call:
    """One API call after validation and authorization.

    :param request: the aiohttp request.
    :param operation: the operation being served.
    :param runtime: the process runtime (database, key-value store, plugins).
    :param body: the validated JSON body (``{}`` when the operation takes none).
    :param query: the validated query parameters.
    :param principal: the authenticated caller, or ``None`` on public operations.
    """

    request: web.Request
    operation: Operation
    runtime: Runtime
    body: dict[str, Any] = field(default_factory=dict)
    query: dict[str, Any] = field(default_factory=dict)
    principal: Any = None

    def path_param(self, name: str) -> str:
        """A path parameter of the matched route."""
        return self.request.match_info[name]

    @property
    def request_id(self) -> str:
        """The request id (also in the ``X-Request-Id`` response header)."""
        return str(self.request.get(REQUEST_ID_KEY, ""))
