"""The simulator's connection fields: its options, and the one credential it may check.

:data:`CONNECTION_FIELDS` is what :class:`~deskpool_driver_simulator.SimulatorDriver`
declares; :mod:`deskpool_driver_simulator.settings` documents each option and validates them.
"""

from __future__ import annotations

from deskpool_driver_api import ConnectionField, FieldKind
from deskpool_driver_simulator.settings import DEFAULT_NODES, DEFAULT_STORAGES, Faults, Timings

_PATTERNS = "fnmatch patterns of VM names or ids"


def _seconds(name: str, label: str, default: float, help: str) -> ConnectionField:
    return ConnectionField(
        name, label, FieldKind.NUMBER, default=default, minimum=0, help=help + " In seconds."
    )


def _patterns(name: str, label: str, help: str) -> ConnectionField:
    return ConnectionField(name, label, FieldKind.LIST, help=help)


_TIMING = Timings()
_FAULTS = Faults()

#: Every option of the simulator, and its ``token`` credential.
CONNECTION_FIELDS: tuple[ConnectionField, ...] = (
    ConnectionField(
        "token",
        "Token",
        FieldKind.SECRET,
        secret=True,
        help="Checked only when the required token option is set; any value otherwise.",
    ),
    ConnectionField(
        "cluster_name",
        "Cluster name",
        default="simulator",
        help="The name a connection check reports.",
    ),
    ConnectionField(
        "nodes", "Nodes", FieldKind.LIST, default=DEFAULT_NODES, help="The simulated nodes."
    ),
    ConnectionField(
        "storages",
        "Storages",
        FieldKind.LIST,
        default=DEFAULT_STORAGES,
        help="The storages a full clone may choose.",
    ),
    ConnectionField(
        "templates",
        "Templates",
        FieldKind.JSON,
        help='A list of {"name": ..., "os": "linux"|"windows"|"other", "node": ...}; by '
        "default ubuntu-22.04, windows-11 and ubuntu-24.04 on the first node.",
    ),
    _seconds("clone_seconds", "Clone time", _TIMING.clone_seconds, "How long a clone takes."),
    _seconds("boot_seconds", "Boot time", _TIMING.boot_seconds, "Power-on until the OS is up."),
    _seconds(
        "agent_seconds",
        "Guest agent delay",
        _TIMING.agent_seconds,
        "OS up until the guest agent answers.",
    ),
    _seconds(
        "oobe_seconds",
        "Windows setup time",
        _TIMING.oobe_seconds,
        "Guest agent answering until Windows finishes OOBE.",
    ),
    _seconds(
        "shutdown_seconds",
        "Shutdown time",
        _TIMING.shutdown_seconds,
        "How long a guest takes to shut down when asked.",
    ),
    ConnectionField(
        "clone_failure_rate",
        "Clone failure rate",
        FieldKind.NUMBER,
        default=_FAULTS.clone_failure_rate,
        minimum=0,
        maximum=1,
        help="The probability (0 to 1) that a clone fails.",
    ),
    _patterns("clone_fails_for", "Clones that fail", f"Names ({_PATTERNS}) whose clones fail."),
    _patterns(
        "agent_never_answers",
        "Silent guest agents",
        f"VMs ({_PATTERNS}) whose agent never answers.",
    ),
    _patterns(
        "oobe_never_finishes",
        "Windows that never finish setup",
        f"VMs ({_PATTERNS}) whose Windows never finishes OOBE.",
    ),
    _patterns(
        "ignores_shutdown",
        "Guests ignoring shutdown",
        f"VMs ({_PATTERNS}) whose guest ignores a shutdown request.",
    ),
    ConnectionField("offline_nodes", "Offline nodes", FieldKind.LIST, help="Nodes that are down."),
    ConnectionField(
        "required_token",
        "Required token",
        FieldKind.SECRET,
        sealed=True,
        help="When set, the token credential must equal it (to try a refused connection). "
        "A secret: kept sealed, never shown back.",
    ),
    ConnectionField(
        "desktop",
        "Desktop",
        FieldKind.JSON,
        sealed_keys=("password",),
        help='Where every VM\'s desktop is: {"protocol": "vnc"|"rdp", "host", "port", '
        '"username", "password", "parameters"}; by default the desktop daemon simulator\'s. '
        "Its password is a secret: kept sealed, never shown back.",
    ),
    ConnectionField(
        "seed",
        "Random seed",
        FieldKind.INTEGER,
        help="Seed of the random clone failures, for repeatable runs.",
    ),
)
