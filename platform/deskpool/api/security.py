"""Authentication and authorization of protected operations.

While the OIDC issuer and audience are not both configured, every protected operation answers
503 (SPEC.md §5.1 rule 4).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

from deskpool.errors import AuthNotConfigured

if TYPE_CHECKING:
    from deskpool.api.routes import Operation
    from deskpool.runtime import Runtime


async def authenticate(request: web.Request, runtime: Runtime, operation: Operation) -> Any:
    """Authenticate the caller of a protected operation and check its declared permission."""
    config = runtime.config
    if not (config["AUTH_OIDC_ISSUER_URL"] and config["AUTH_OIDC_AUDIENCE"]):
        raise AuthNotConfigured(
            "Protected operations are unavailable until AUTH_OIDC_ISSUER_URL and "
            "AUTH_OIDC_AUDIENCE are both set."
        )
    raise AuthNotConfigured("No auth provider is available in this process.")
