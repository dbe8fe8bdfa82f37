"""The libvirt driver's connection fields: how each host authenticates, and the options.

:data:`CONNECTION_FIELDS` is what :class:`~deskpool_driver_libvirt.LibvirtDriver` declares.
The endpoint is the first host's URI; ``hosts`` adds the others. The credentials are sealed
and apply to every host: a SASL user name and password (``qemu+tcp://`` and ``qemu+tls://``
with ``auth_tcp``/``auth_tls = "sasl"``), an SSH private key (``qemu+ssh://``) or a TLS client
certificate and key (``qemu+tls://``, verified against the connection's CA certificate).
"""

from __future__ import annotations

from deskpool_driver_api import ConnectionField, FieldKind

#: The credentials and every option :class:`LibvirtDriver` reads.
CONNECTION_FIELDS: tuple[ConnectionField, ...] = (
    ConnectionField(
        "username",
        "SASL user name",
        FieldKind.TEXT,
        secret=True,
        help="For a host whose libvirtd asks for SASL authentication (saslpasswd2 -a libvirt).",
    ),
    ConnectionField(
        "password",
        "SASL password",
        FieldKind.SECRET,
        secret=True,
        help="The SASL user's password.",
    ),
    ConnectionField(
        "ssh_private_key",
        "SSH private key",
        FieldKind.SECRET,
        secret=True,
        help="PEM/OpenSSH private key for qemu+ssh:// hosts (no passphrase).",
    ),
    ConnectionField(
        "tls_client_cert",
        "TLS client certificate",
        FieldKind.SECRET,
        secret=True,
        help="PEM client certificate for qemu+tls:// hosts (libvirt's clientcert.pem).",
    ),
    ConnectionField(
        "tls_client_key",
        "TLS client key",
        FieldKind.SECRET,
        secret=True,
        help="PEM private key of the client certificate (libvirt's clientkey.pem).",
    ),
    ConnectionField(
        "hosts",
        "Further hosts",
        FieldKind.LIST,
        help="More libvirt URIs, one per host (qemu+ssh://root@kvm2/system); each is a node.",
    ),
    ConnectionField(
        "ssh_known_hosts",
        "SSH known hosts",
        FieldKind.TEXT,
        help="known_hosts lines for the qemu+ssh:// hosts (ssh-keyscan kvm1); without them "
        "the system's known_hosts applies.",
    ),
    ConnectionField(
        "default_storage_pool",
        "Storage pool for full clones",
        FieldKind.TEXT,
        help="Where a full clone's volumes go when the pool names no storage; the template's "
        "pool by default.",
    ),
    ConnectionField(
        "vnc_host",
        "VNC host",
        FieldKind.TEXT,
        help="The address guacd connects to for a VNC display listening on every address "
        "(0.0.0.0); the host part of the URI by default.",
    ),
    ConnectionField(
        "rdp_port",
        "RDP port",
        FieldKind.INTEGER,
        default=3389,
        minimum=1,
        maximum=65535,
        help="The port of the guests' RDP server.",
    ),
    ConnectionField(
        "rdp_parameters",
        "RDP parameters",
        FieldKind.JSON,
        help='Guacamole parameters of RDP connections; default {"security": "any", '
        '"ignore-cert": "true"}.',
    ),
    ConnectionField(
        "agent_timeout",
        "Guest agent timeout",
        FieldKind.INTEGER,
        default=5,
        minimum=1,
        maximum=300,
        help="Seconds one guest agent command may take.",
    ),
)
