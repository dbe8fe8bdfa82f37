"""The commands of the cluster use cases: typed values the API's edge makes, the services take.

``options`` stay a mapping: they are the driver's own settings, declared by each driver
(:class:`~deskpool_driver_api.ConnectionField`) and checked against its declaration by the
service, not a request body. A change (:class:`ChangeCluster`) holds each member as
``T | Unset``: :data:`~deskpool.unset.UNSET` keeps the stored value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from deskpool.clusters.repository import ConnectionSettings
from deskpool.secrets import SecretValue
from deskpool.unset import UNSET, Unset, given


@dataclass(frozen=True, kw_only=True)
class TlsChange:
    """TLS settings to set, member by member."""

    verify: bool | Unset = UNSET
    ca_certificate: str | Unset | None = UNSET
    fingerprint: str | Unset | None = UNSET

    def applied_to(self, settings: ConnectionSettings) -> ConnectionSettings:
        """``settings`` with the TLS members this change sets."""
        return replace(
            settings,
            tls_verify=settings.tls_verify if self.verify is UNSET else self.verify,
            ca_certificate=(
                settings.ca_certificate if self.ca_certificate is UNSET else self.ca_certificate
            ),
            fingerprint=settings.fingerprint if self.fingerprint is UNSET else self.fingerprint,
        )


@dataclass(frozen=True, kw_only=True)
class CreateCluster:
    """A new cluster connection."""

    name: str
    driver: str
    endpoint: str
    tls: TlsChange = TlsChange()
    options: Mapping[str, Any] = field(default_factory=dict)
    credentials: Mapping[str, SecretValue] = field(default_factory=dict)

    def settings(self) -> ConnectionSettings:
        """How to reach the cluster, as given."""
        return self.tls.applied_to(ConnectionSettings(endpoint=self.endpoint, options=self.options))


@dataclass(frozen=True, kw_only=True)
class ChangeCluster:
    """Changes to a cluster connection: members left :data:`UNSET` stay as they are."""

    name: str | Unset = UNSET
    endpoint: str | Unset = UNSET
    tls: TlsChange | Unset = UNSET
    #: Replaces the options whole (secret values it leaves out are kept, see the service).
    options: Mapping[str, Any] | Unset = UNSET
    #: Replaces the credentials whole; ``None`` removes them.
    credentials: Mapping[str, SecretValue] | Unset | None = UNSET

    @property
    def members(self) -> frozenset[str]:
        """The names of the members this change sets."""
        return frozenset(given(self))

    def applied_to(self, settings: ConnectionSettings) -> ConnectionSettings:
        """``settings`` with what this change sets (``tls`` member by member)."""
        if self.endpoint is not UNSET:
            settings = replace(settings, endpoint=self.endpoint)
        if self.options is not UNSET:
            settings = replace(settings, options=self.options)
        return settings if self.tls is UNSET else self.tls.applied_to(settings)
