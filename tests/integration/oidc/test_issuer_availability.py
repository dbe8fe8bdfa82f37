"""An unreachable or untrusted issuer, an unconfigured or closed provider, and the plugin."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from tests.support.oidc import (
    AUDIENCE,
)

import deskpool_oidc
from deskpool.area_settings import declare_area_settings
from deskpool.auth import AuthProviderState
from deskpool.config import SettingRegistry, declare_core_settings, load_config
from deskpool.errors import AuthNotConfigured, ServiceUnavailable
from deskpool.registry import Registry
from deskpool.testing.idp import TestIdentityProvider
from deskpool_oidc import OidcAuthProvider


async def test_an_unreachable_issuer_answers_503_then_recovers(
    make_verifier: Callable[..., OidcAuthProvider],
) -> None:
    idp = TestIdentityProvider(audience=AUDIENCE)
    issuer = idp.bind()  # the address is known; connections are refused
    verifier = make_verifier(issuer)
    try:
        await verifier.start()  # must not raise
        assert verifier.state is AuthProviderState.UNAVAILABLE
        assert not verifier.ready
        assert verifier.last_error is not None
        with pytest.raises(ServiceUnavailable) as caught:
            await verifier.verify(idp.issue_token())
        assert caught.value.status == 503
        assert "Retry-After" in caught.value.headers
        await idp.start()
        await asyncio.wait_for(verifier.wait_until_ready(), timeout=30)
        assert verifier.ready
        assert (await verifier.verify(idp.issue_token("ada"))).subject == "ada"
        assert verifier.stats.discovery_attempts >= 2
    finally:
        await verifier.close()
        await idp.stop()


async def test_a_discovery_document_naming_another_issuer_is_not_trusted(
    idp: TestIdentityProvider, make_verifier: Callable[..., OidcAuthProvider]
) -> None:
    other_spelling = idp.issuer_url.replace("127.0.0.1", "localhost")
    verifier = make_verifier(other_spelling)
    try:
        await verifier.start()
        assert verifier.state is AuthProviderState.UNAVAILABLE
        assert "issuer" in (verifier.last_error or "")
        with pytest.raises(ServiceUnavailable):
            await verifier.verify(idp.issue_token())
    finally:
        await verifier.close()


async def test_an_unconfigured_provider_answers_auth_not_configured(
    make_verifier: Callable[..., OidcAuthProvider],
) -> None:
    verifier = make_verifier("", audience="")
    await verifier.start()
    assert verifier.state is AuthProviderState.NOT_CONFIGURED
    assert not verifier.configured
    with pytest.raises(AuthNotConfigured) as caught:
        await verifier.verify("anything")
    assert caught.value.status == 503
    await verifier.close()


async def test_a_closed_provider_verifies_nothing(
    idp: TestIdentityProvider, make_verifier: Callable[..., OidcAuthProvider]
) -> None:
    verifier = make_verifier(idp.issuer_url)
    await verifier.start()
    token = idp.issue_token()
    await verifier.verify(token)
    await verifier.close()
    with pytest.raises(ServiceUnavailable):
        await verifier.verify(token)


async def test_the_plugin_registers_a_factory_reading_the_configuration(
    idp: TestIdentityProvider,
) -> None:
    registry: Registry[Any] = Registry("auth provider")
    deskpool_oidc.deskpool_register_auth_providers(registry)
    settings = SettingRegistry()
    declare_core_settings(settings)
    declare_area_settings(settings)
    deskpool_oidc.deskpool_declare_settings(settings)
    config = load_config(
        settings,
        {
            "DATABASE_URL": "postgresql://127.0.0.1:5432/unused",
            "KVSTORE_ADDR": "127.0.0.1:6379",
            "AUTH_OIDC_ISSUER_URL": idp.issuer_url,
            "AUTH_OIDC_AUDIENCE": AUDIENCE,
            "AUTH_OIDC_GROUPS_CLAIM": "realm_access.groups",
        },
    )
    provider = registry.get("oidc")(config)
    assert isinstance(provider, OidcAuthProvider)
    await provider.start()
    try:
        token = idp.issue_token("ada", realm_access={"groups": ["ops"]}, roles="auditor")
        identity = await provider.verify(token)
    finally:
        await provider.close()
    assert identity.groups == ("ops",)
    assert identity.roles == ("auditor",)
