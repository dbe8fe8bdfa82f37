"""Hypervisor cluster connections: their records, sealed credentials, and drivers.

- :mod:`deskpool.clusters.service`: the use cases (connect, change, delete and check a
  cluster, read its nodes and templates), each in one transaction with its audit event;
- :mod:`deskpool.clusters.repository`: the ``clusters`` table and the credentials sealed for
  each record (``SecretContext("cluster.credentials", <cluster id>, "values")``);
- :mod:`deskpool.clusters.drivers`: :class:`DriverManager`, one per runtime
  (:func:`driver_manager_for`), which knows the installed drivers and builds a driver for a
  cluster record, with driver call metrics;
- :mod:`deskpool.clusters.tls`: checks of the TLS settings a record stores.

The REST resource is :mod:`deskpool.api.resources.clusters` (its schemas in
:mod:`deskpool.api.resources.cluster_schemas`).
"""

from deskpool.clusters.drivers import (
    INSTALLED,
    NOT_INSTALLED,
    DriverCallMetrics,
    DriverManager,
    DriverNotInstalled,
    driver_manager_for,
)
from deskpool.clusters.repository import (
    CREDENTIALS_KIND,
    ClusterNameTaken,
    ClusterRecord,
    ConnectionSettings,
    credentials_context,
    pools_using_cluster,
)

__all__ = [
    "CREDENTIALS_KIND",
    "INSTALLED",
    "NOT_INSTALLED",
    "ClusterNameTaken",
    "ClusterRecord",
    "ConnectionSettings",
    "DriverCallMetrics",
    "DriverManager",
    "DriverNotInstalled",
    "credentials_context",
    "driver_manager_for",
    "pools_using_cluster",
]
