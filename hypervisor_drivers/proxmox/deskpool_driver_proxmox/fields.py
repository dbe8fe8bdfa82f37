"""The Proxmox VE driver's connection fields: the API token, and its options.

:data:`CONNECTION_FIELDS` is what :class:`~deskpool_driver_proxmox.ProxmoxDriver` declares.
The endpoint and TLS settings (verification, a CA certificate or a pinned fingerprint for a
self-signed cluster) are every connection's, not declared here; nodes and storages are chosen
per pool, not per connection.
"""

from __future__ import annotations

from deskpool_driver_api import ConnectionField, FieldKind

#: The API token (credentials) and every option :class:`ProxmoxDriver` reads.
CONNECTION_FIELDS: tuple[ConnectionField, ...] = (
    ConnectionField(
        "token_id",
        "API token id",
        FieldKind.TEXT,
        required=True,
        secret=True,
        placeholder="deskpool@pve!deskpool",
        help="USER@REALM!TOKENID of a Proxmox VE API token (Datacenter > Permissions > API "
        "Tokens) holding the privileges the driver's documentation lists.",
    ),
    ConnectionField(
        "token_secret",
        "API token secret",
        FieldKind.SECRET,
        required=True,
        secret=True,
        help="The token's secret (a UUID), shown once when the token was created.",
    ),
    ConnectionField(
        "request_timeout",
        "Request timeout",
        FieldKind.NUMBER,
        default=30.0,
        minimum=0.001,
        help="Seconds one API request may take.",
    ),
    ConnectionField(
        "task_poll_interval",
        "Task poll interval",
        FieldKind.NUMBER,
        default=1.0,
        minimum=0.001,
        help="Seconds between two looks at a running task (a clone, a shutdown).",
    ),
    ConnectionField(
        "abandoned_clone_grace",
        "Abandoned clone grace",
        FieldKind.NUMBER,
        default=3600.0,
        minimum=0.001,
        help="Seconds a clone whose caller went away is still watched, so it gets its tags.",
    ),
    ConnectionField(
        "desktop_ports",
        "Desktop ports",
        FieldKind.JSON,
        help='Ports per protocol, such as {"rdp": 3389, "vnc": 5900} (the defaults).',
    ),
    ConnectionField(
        "desktop_parameters",
        "Desktop parameters",
        FieldKind.JSON,
        help='Guacamole connection parameters per protocol; default {"rdp": {"security": '
        '"any", "ignore-cert": "true"}} (a Windows guest\'s RDP certificate is self-signed).',
    ),
)
