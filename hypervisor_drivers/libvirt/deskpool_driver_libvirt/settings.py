"""A libvirt cluster connection's settings, checked once when the driver is made.

The endpoint and the ``hosts`` option name the cluster's hosts (one libvirt QEMU URI each, one
node name each); the options set RDP's port and Guacamole parameters, the guest agent's
timeout, the address of displays that listen everywhere, and where full clones go. Anything
else is a :class:`DriverConfigurationError` naming the field.
"""

from __future__ import annotations

from dataclasses import dataclass

from deskpool_driver_api import ClusterConnection, DriverConfigurationError, connection_problems
from deskpool_driver_libvirt.fields import CONNECTION_FIELDS
from deskpool_driver_libvirt.hosts import Credentials, node_name, options_hosts

#: The Guacamole parameters of RDP connections unless the ``rdp_parameters`` option says.
DEFAULT_RDP_PARAMETERS = {"security": "any", "ignore-cert": "true"}
_SUPPORTED_SCHEMES = ("qemu", "qemu+ssh", "qemu+libssh", "qemu+libssh2", "qemu+tls", "qemu+tcp")


@dataclass(frozen=True)
class LibvirtSettings:
    """What the driver needs of its cluster connection."""

    uris: list[str]
    credentials: Credentials
    rdp_parameters: dict[str, str]
    rdp_port: int
    agent_timeout: int
    vnc_host: str | None
    default_storage_pool: str | None

    @classmethod
    def of(cls, connection: ClusterConnection) -> LibvirtSettings:
        """The settings of ``connection``; :class:`DriverConfigurationError` if they are wrong."""
        problems = connection_problems(
            CONNECTION_FIELDS, connection.credentials, connection.options
        )
        if problems:
            raise DriverConfigurationError(
                "; ".join(f"{problem.pointer}: {problem.message}" for problem in problems)
            )
        options = dict(connection.options)
        uris = options_hosts(connection.endpoint, options)
        for uri in uris:
            scheme, _, rest = uri.partition("://")
            if scheme not in _SUPPORTED_SCHEMES or not rest.rstrip("/").endswith(
                ("system", "session")
            ):
                raise DriverConfigurationError(
                    f"{uri!r} is not a QEMU libvirt URI (qemu:///system, "
                    "qemu+ssh://user@host/system, qemu+tls://host/system)"
                )
        names = [node_name(uri) for uri in uris]
        if len(set(names)) < len(names):
            raise DriverConfigurationError(
                f"two hosts have the same node name ({', '.join(names)}): one URI per host"
            )
        rdp_parameters = options.get("rdp_parameters", DEFAULT_RDP_PARAMETERS)
        if not isinstance(rdp_parameters, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in rdp_parameters.items()
        ):
            raise DriverConfigurationError("rdp_parameters must map parameter names to strings")
        credentials = connection.credentials
        return cls(
            uris=uris,
            credentials=Credentials(
                username=credentials.get("username"),
                password=credentials.get("password"),
                ssh_private_key=credentials.get("ssh_private_key"),
                ssh_known_hosts=options.get("ssh_known_hosts"),
                tls_client_cert=credentials.get("tls_client_cert"),
                tls_client_key=credentials.get("tls_client_key"),
                ca_cert=connection.ca_cert,
                tls_verify=connection.tls_verify,
            ),
            rdp_parameters=dict(rdp_parameters),
            rdp_port=int(options.get("rdp_port", 3389)),
            agent_timeout=int(options.get("agent_timeout", 5)),
            vnc_host=options.get("vnc_host"),
            default_storage_pool=options.get("default_storage_pool"),
        )
