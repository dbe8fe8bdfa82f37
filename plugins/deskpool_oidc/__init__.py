"""The ``oidc`` auth provider plugin: bearer access tokens from an OpenID Connect issuer.

Registered under the entry point ``deskpool.auth_providers: oidc`` and chosen by
``AUTH_PROVIDER=oidc`` (the default). Everything OIDC-specific lives here, not in the platform:
the plugin declares its settings (``AUTH_OIDC_ISSUER_URL``, ``AUTH_OIDC_AUDIENCE``,
``AUTH_OIDC_GROUPS_CLAIM``, ``AUTH_OIDC_ROLES_CLAIM`` of SPEC §5.3, and
``AUTH_OIDC_ACCEPT_ID_TOKENS``), declares the OpenAPI document's security schemes
(``bearerAuth``, ``openIdConnect``), says what protected routes answer while the issuer or the
audience is missing, and tells ``/docs`` how a browser signs in (the issuer's discovery document,
the console's client ``WEB_PUBLIC_OIDC_CLIENT_ID`` and ``WEB_PUBLIC_OIDC_SCOPE``). The verifier
is :class:`deskpool_oidc.provider.OidcAuthProvider`.
"""

from __future__ import annotations

from dataclasses import replace

from deskpool.api.docs import DISCOVERY_PATH
from deskpool.api.routes import Authentication, RouteTable
from deskpool.auth import AuthProviderFactory
from deskpool.config import Config, Setting, SettingRegistry, parse_bool, parse_url
from deskpool.plugins import hookimpl
from deskpool.registry import Registry
from deskpool_oidc.provider import OidcAuthProvider, OidcSettings

__all__ = ["OidcAuthProvider", "OidcSettings", "create_provider"]

#: The reference section the plugin's settings are listed under (SPEC §5.3).
SECTION = "Authentication"


def create_provider(config: Config) -> OidcAuthProvider:
    """Build the provider from the process configuration.

    When the issuer or the audience is unset, the provider is created anyway in the
    ``not_configured`` state, and protected routes answer 503 (SPEC §5.1.4).
    """
    audience = str(config["AUTH_OIDC_AUDIENCE"] or "")
    return OidcAuthProvider(
        OidcSettings(
            issuer_url=str(config["AUTH_OIDC_ISSUER_URL"] or ""),
            audience=audience,
            groups_claim=str(config["AUTH_OIDC_GROUPS_CLAIM"] or "groups"),
            roles_claim=str(config["AUTH_OIDC_ROLES_CLAIM"] or "roles"),
            accept_id_tokens=bool(config["AUTH_OIDC_ACCEPT_ID_TOKENS"]),
            browser_client_id=str(config["WEB_PUBLIC_OIDC_CLIENT_ID"] or audience),
            browser_scopes=str(config["WEB_PUBLIC_OIDC_SCOPE"] or "openid"),
        )
    )


@hookimpl
def deskpool_register_auth_providers(registry: Registry[AuthProviderFactory]) -> None:
    """Register the ``oidc`` auth provider; its factory takes the configuration."""
    registry.add("oidc", create_provider)


@hookimpl
def deskpool_declare_settings(registry: SettingRegistry) -> None:
    """Declare the OIDC settings (SPEC §5.3, with SPEC's defaults)."""
    declared = (
        Setting(
            "AUTH_OIDC_ISSUER_URL",
            parse_url("https", "http"),
            "",
            "Issuer URL of the identity provider. Protected routes answer 503 until it and the "
            "audience are set.",
            type_name="url",
            required="Yes",
        ),
        Setting(
            "AUTH_OIDC_AUDIENCE",
            str,
            "",
            "OIDC client ID or audience that tokens are validated against: the audience the "
            "identity provider writes into its access tokens for this API "
            "(see docs/operators/identity.md).",
            required="Yes",
        ),
        Setting(
            "AUTH_OIDC_GROUPS_CLAIM",
            str,
            "groups",
            "Token claim read for group membership. Dot-paths for nested claims are supported.",
            type_name="claim path",
        ),
        Setting(
            "AUTH_OIDC_ROLES_CLAIM",
            str,
            "roles",
            "Token claim read for role membership.",
            type_name="claim path",
        ),
        Setting(
            "AUTH_OIDC_ACCEPT_ID_TOKENS",
            parse_bool,
            "false",
            "Accept bearer tokens that look like ID tokens (`nonce`, `at_hash`, `c_hash`, "
            "`s_hash`, Keycloak's `typ: ID`) or are not recognisably access tokens (not typed "
            "`at+jwt`, none of `scope`, `scp`, `client_id`, `roles`). Only for issuers whose "
            "access tokens are ID tokens (Dex); see docs/operators/identity.md.",
            type_name="boolean",
        ),
    )
    for setting in declared:
        registry.add(replace(setting, section=SECTION, owner="oidc"))


@hookimpl
def deskpool_register_routes(routes: RouteTable) -> None:
    """Declare how callers authenticate, in the OpenAPI document's introduction and schemes.

    A bearer access token, and the issuer's browser sign-in (authorization code with PKCE)
    through the discovery path ``/docs`` serves.
    """
    routes.describe_authentication(
        Authentication(
            credentials=(
                "Every protected operation needs `Authorization: Bearer <access token>`: an "
                "OIDC access token\nfrom the identity provider configured for this instance "
                "(issuer, audience, signature and expiry\nare validated on every request)."
            ),
            availability=(
                "While the instance has no OIDC issuer and audience configured, protected\n"
                "operations answer 503. The interactive documentation at `/docs` signs in "
                "through the issuer\n(authorization code with PKCE) to try requests."
            ),
        )
    )
    routes.security_scheme(
        "bearerAuth",
        {
            "type": "http",
            "scheme": "bearer",
            "bearerFormat": "JWT",
            "description": (
                "An OIDC access token from the instance's identity provider "
                "(AUTH_OIDC_ISSUER_URL), for the audience AUTH_OIDC_AUDIENCE."
            ),
        },
    )
    routes.security_scheme(
        "openIdConnect",
        {
            "type": "openIdConnect",
            "openIdConnectUrl": DISCOVERY_PATH,
            "description": (
                "Sign in through the instance's OIDC issuer (AUTH_OIDC_ISSUER_URL) with the "
                "authorization code flow and PKCE. The URL, relative to the API, redirects to "
                "the issuer's discovery document."
            ),
        },
    )
