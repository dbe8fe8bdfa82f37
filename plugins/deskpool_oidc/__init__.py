"""The ``oidc`` auth provider plugin: bearer access tokens from an OpenID Connect issuer.

Registered under the entry point ``deskpool.auth_providers: oidc`` and chosen by
``AUTH_PROVIDER=oidc`` (the default). It reads ``AUTH_OIDC_ISSUER_URL``,
``AUTH_OIDC_AUDIENCE``, ``AUTH_OIDC_GROUPS_CLAIM`` and ``AUTH_OIDC_ROLES_CLAIM``, all declared
by the platform (SPEC §5.3). The verifier is :class:`deskpool_oidc.provider.OidcAuthProvider`.
"""

from __future__ import annotations

from typing import Any

from deskpool.config import Config
from deskpool.plugins import hookimpl
from deskpool.registry import Registry
from deskpool_oidc.provider import OidcAuthProvider, OidcSettings

__all__ = ["OidcAuthProvider", "OidcSettings", "create_provider"]


def create_provider(config: Config) -> OidcAuthProvider:
    """Build the provider from the process configuration.

    When the issuer or the audience is unset, the provider is created anyway in the
    ``not_configured`` state, and protected routes answer 503 (SPEC §5.1.4).
    """
    return OidcAuthProvider(
        OidcSettings(
            issuer_url=str(config["AUTH_OIDC_ISSUER_URL"] or ""),
            audience=str(config["AUTH_OIDC_AUDIENCE"] or ""),
            groups_claim=str(config["AUTH_OIDC_GROUPS_CLAIM"] or "groups"),
            roles_claim=str(config["AUTH_OIDC_ROLES_CLAIM"] or "roles"),
        )
    )


@hookimpl
def deskpool_register_auth_providers(registry: Registry[Any]) -> None:
    """Register the ``oidc`` auth provider; its factory takes the configuration."""
    registry.add("oidc", create_provider)
