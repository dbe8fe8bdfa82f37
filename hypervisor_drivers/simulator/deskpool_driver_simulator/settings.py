"""The simulator's settings, read from a cluster connection's ``options``.

Every option is optional; the defaults make a two-node cluster with a Linux and a Windows
template whose phases (clone, boot, guest agent, Windows OOBE, shutdown) each take about ten
milliseconds, so tests and ``deskpool dev`` are fast. Slow them down to watch provisioning.

========================  ==================================================================
option                    meaning
========================  ==================================================================
``nodes``                 node names (default ``["sim-node-1", "sim-node-2"]``)
``storages``              storage names a full clone may choose (default ``["local",
                          "shared"]``)
``templates``             ``[{"name": ..., "os": "linux"|"windows", "node": ...}]``
                          (default: ``ubuntu-22.04``, ``windows-11`` and ``ubuntu-24.04`` on
                          the first node)
``clone_seconds``         how long a clone takes (default 0.01)
``boot_seconds``          power-on until the OS is up (default 0.01)
``agent_seconds``         OS up until the guest agent answers (default 0.01)
``oobe_seconds``          agent answering until Windows finishes OOBE (default 0.02)
``shutdown_seconds``      how long a guest takes to shut down when asked (default 0.01)
``clone_failure_rate``    probability (0..1) that a clone fails (default 0)
``clone_fails_for``       name patterns (``fnmatch``) whose clones always fail
``agent_never_answers``   VM name or id patterns whose agent never answers
``oobe_never_finishes``   VM name or id patterns whose Windows never finishes OOBE
``ignores_shutdown``      VM name or id patterns whose guest ignores a shutdown request
``offline_nodes``         nodes that are down
``required_token``        when set, ``credentials["token"]`` must equal it
``desktop``               where every VM's desktop is (see below)
``seed``                  seed of the random clone failures, for repeatable runs
``cluster_name``          the name ``check_connection`` reports (default ``simulator``)
========================  ==================================================================

Desktops: by default every running VM's desktop is ``vnc`` on port 5900 at a host named after
the VM, which is what the desktop daemon simulator serves (it accepts any host name and draws
the VM's name). To try the whole path with a real desktop daemon (guacd) and a real VNC or
RDP server before connecting a hypervisor, give every VM a real desktop::

    "desktop": {"protocol": "rdp", "host": "10.0.0.5", "port": 3389,
                "username": "demo", "password": "...", "parameters": {"ignore-cert": "true"}}

``protocol`` is ``vnc`` or ``rdp`` (default ``vnc``); ``host`` defaults to the VM's name,
``port`` to the protocol's (5900, 3389); ``username`` and ``password`` become the endpoint's
credentials and ``parameters`` its other Guacamole connection parameters. Every key is
optional. The simulator answers this desktop whatever protocol a pool prefers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from deskpool_driver_api import DesktopProtocol, DriverConfigurationError, OsType

DEFAULT_NODES = ("sim-node-1", "sim-node-2")
DEFAULT_STORAGES = ("local", "shared")
#: The port of each desktop protocol unless the ``desktop`` option names another.
DEFAULT_DESKTOP_PORTS = {DesktopProtocol.RDP: 3389, DesktopProtocol.VNC: 5900}
#: Template ids start here; desktop VM ids start at :data:`FIRST_VM_ID` and never reach them.
FIRST_TEMPLATE_ID = 9000
FIRST_VM_ID = 100


@dataclass(frozen=True)
class Timings:
    """How long each simulated phase takes, in seconds."""

    clone_seconds: float = 0.01
    boot_seconds: float = 0.01
    agent_seconds: float = 0.01
    oobe_seconds: float = 0.02
    shutdown_seconds: float = 0.01


@dataclass(frozen=True)
class Faults:
    """Injected failures. Patterns are :func:`fnmatch.fnmatchcase` patterns on a VM's name or id.

    Faults come from the connection's options (fixed) and from the admin API (stored in shared
    state); the simulator obeys their union.
    """

    offline_nodes: frozenset[str] = frozenset()
    clone_failure_rate: float = 0.0
    clone_fails_for: frozenset[str] = frozenset()
    agent_never_answers: frozenset[str] = frozenset()
    oobe_never_finishes: frozenset[str] = frozenset()
    ignores_shutdown: frozenset[str] = frozenset()

    def union(self, other: Faults) -> Faults:
        """Both sets of faults at once (the higher failure rate)."""
        return Faults(
            offline_nodes=self.offline_nodes | other.offline_nodes,
            clone_failure_rate=max(self.clone_failure_rate, other.clone_failure_rate),
            clone_fails_for=self.clone_fails_for | other.clone_fails_for,
            agent_never_answers=self.agent_never_answers | other.agent_never_answers,
            oobe_never_finishes=self.oobe_never_finishes | other.oobe_never_finishes,
            ignores_shutdown=self.ignores_shutdown | other.ignores_shutdown,
        )

    def as_json(self) -> dict[str, Any]:
        """A JSON-ready dict (sets as sorted lists)."""
        out: dict[str, Any] = {}
        for item in fields(self):
            value = getattr(self, item.name)
            out[item.name] = sorted(value) if isinstance(value, frozenset) else value
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Faults:
        """Read what :meth:`as_json` wrote."""
        return _faults_from(data, "faults")


@dataclass(frozen=True)
class TemplateSpec:
    """A simulated template."""

    id: str
    name: str
    node: str
    os_type: OsType


@dataclass(frozen=True, repr=False)
class DesktopSpec:
    """Where the VMs' desktops are (the ``desktop`` option); the password is never shown."""

    protocol: DesktopProtocol = DesktopProtocol.VNC
    #: ``None``: a host named after the VM (what the desktop daemon simulator serves).
    host: str | None = None
    port: int | None = None
    username: str | None = None
    password: str | None = None
    parameters: Mapping[str, str] = field(default_factory=dict)

    def __repr__(self) -> str:
        return (
            f"DesktopSpec(protocol={self.protocol.value!r}, host={self.host!r}, "
            f"port={self.port!r}, username={self.username!r}, "
            f"password={'<hidden>' if self.password else None!r}, "
            f"parameters={dict(self.parameters)!r})"
        )

    @property
    def port_or_default(self) -> int:
        """The configured port, or the protocol's usual one."""
        return self.port if self.port is not None else DEFAULT_DESKTOP_PORTS[self.protocol]

    @property
    def credentials(self) -> dict[str, str]:
        """``username`` and ``password`` as the endpoint's credentials, when set."""
        pairs = (("username", self.username), ("password", self.password))
        return {key: value for key, value in pairs if value}


@dataclass(frozen=True)
class SimulatorSettings:
    """Everything the options configure."""

    nodes: tuple[str, ...] = DEFAULT_NODES
    storages: tuple[str, ...] = DEFAULT_STORAGES
    templates: tuple[TemplateSpec, ...] = ()
    timings: Timings = Timings()
    faults: Faults = Faults()
    required_token: str | None = field(default=None, repr=False)  # a secret option
    desktop: DesktopSpec = DesktopSpec()
    seed: int | None = None
    cluster_name: str = "simulator"

    def template(self, template_id: str) -> TemplateSpec | None:
        """The template with id ``template_id``, if there is one."""
        return next((t for t in self.templates if t.id == template_id), None)

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> SimulatorSettings:
        """Validate ``options`` (a connection's) into settings.

        :raises DriverConfigurationError: naming every unknown or invalid option.
        """
        problems: list[str] = []
        known = {
            "nodes",
            "storages",
            "templates",
            "required_token",
            "desktop",
            "seed",
            "cluster_name",
            *(item.name for item in fields(Timings)),
            *(item.name for item in fields(Faults)),
        }
        for key in sorted(set(options) - known):
            problems.append(f"unknown option {key!r} (known: {', '.join(sorted(known))})")

        def read(name: str, parse: Any, default: Any) -> Any:
            if name not in options:
                return default
            try:
                return parse(options[name], name)
            except (TypeError, ValueError) as error:
                problems.append(str(error))
                return default

        nodes = read("nodes", _names, DEFAULT_NODES)
        storages = read("storages", _names, DEFAULT_STORAGES)
        templates = read("templates", lambda v, n: _templates(v, n, nodes), None)
        if templates is None:
            templates = _default_templates(nodes)
        timings = Timings(
            **{item.name: read(item.name, _seconds, item.default) for item in fields(Timings)}
        )
        faults = Faults(
            **{
                item.name: read(
                    item.name,
                    _rate if item.name == "clone_failure_rate" else _patterns,
                    item.default,
                )
                for item in fields(Faults)
            }
        )
        unknown_offline = faults.offline_nodes - set(nodes)
        if unknown_offline:
            problems.append(f"offline_nodes names unknown nodes: {sorted(unknown_offline)}")
        settings = cls(
            nodes=nodes,
            storages=storages,
            templates=templates,
            timings=timings,
            faults=faults,
            required_token=read("required_token", _text, None),
            desktop=read("desktop", _desktop, DesktopSpec()),
            seed=read("seed", _integer, None),
            cluster_name=read("cluster_name", _text, "simulator"),
        )
        if problems:
            raise DriverConfigurationError("simulator options: " + "; ".join(problems))
        return settings


def _default_templates(nodes: Sequence[str]) -> tuple[TemplateSpec, ...]:
    return (
        TemplateSpec(str(FIRST_TEMPLATE_ID), "ubuntu-22.04", nodes[0], OsType.LINUX),
        TemplateSpec(str(FIRST_TEMPLATE_ID + 1), "windows-11", nodes[0], OsType.WINDOWS),
        # A second Linux template, so a pool's image rollout can be tried at once.
        TemplateSpec(str(FIRST_TEMPLATE_ID + 2), "ubuntu-24.04", nodes[0], OsType.LINUX),
    )


def _text(value: Any, name: str) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a non-empty string")
    return value


def _integer(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer")
    return value


def _seconds(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ValueError(f"{name} must be a number of seconds >= 0")
    return float(value)


def _names(value: Any, name: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [part.strip() for part in value.split(",") if part.strip()]
    if not isinstance(value, list | tuple) or not value:
        raise ValueError(f"{name} must be a non-empty list of names")
    if not all(isinstance(item, str) and item for item in value):
        raise ValueError(f"{name} must contain only non-empty strings")
    if len(set(value)) != len(value):
        raise ValueError(f"{name} has duplicates")
    return tuple(value)


def _patterns(value: Any, name: str) -> frozenset[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list | tuple | set | frozenset):
        raise ValueError(f"{name} must be a list of patterns")
    if not all(isinstance(item, str) and item for item in value):
        raise ValueError(f"{name} must contain only non-empty strings")
    return frozenset(value)


def _rate(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise ValueError(f"{name} must be a probability between 0 and 1")
    return float(value)


def _port(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 65536:
        raise ValueError(f"{name} must be a port (1..65535)")
    return value


def _desktop(value: Any, name: str) -> DesktopSpec:
    if not isinstance(value, Mapping):
        raise ValueError(f"{name} must be an object (protocol, host, port, username...)")
    known = {"protocol", "host", "port", "username", "password", "parameters"}
    unknown = sorted(set(value) - known)
    if unknown:
        raise ValueError(f"{name}: unknown keys {unknown} (known: {sorted(known)})")
    try:
        protocol = DesktopProtocol(value.get("protocol", "vnc"))
    except ValueError:
        raise ValueError(f"{name}.protocol must be vnc or rdp") from None
    parameters = value.get("parameters", {})
    if not isinstance(parameters, Mapping) or not all(
        isinstance(key, str) and isinstance(item, str) for key, item in parameters.items()
    ):
        raise ValueError(f"{name}.parameters must map parameter names to strings")

    def optional(key: str, parse: Any) -> Any:
        return parse(value[key], f"{name}.{key}") if key in value else None

    return DesktopSpec(
        protocol=protocol,
        host=optional("host", _text),
        port=optional("port", _port),
        username=optional("username", _text),
        password=optional("password", _text),
        parameters=dict(parameters),
    )


def _templates(value: Any, name: str, nodes: Sequence[str]) -> tuple[TemplateSpec, ...]:
    if not isinstance(value, list | tuple) or not value:
        raise ValueError(f"{name} must be a non-empty list of templates")
    specs = []
    for index, item in enumerate(value):
        if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
            raise ValueError(f"{name}[{index}] must be an object with a name")
        try:
            os_type = OsType(item.get("os", "linux"))
        except ValueError:
            raise ValueError(f"{name}[{index}].os must be linux, windows or other") from None
        node = item.get("node", nodes[0])
        if node not in nodes:
            raise ValueError(f"{name}[{index}].node {node!r} is not one of the nodes")
        specs.append(TemplateSpec(str(FIRST_TEMPLATE_ID + index), item["name"], node, os_type))
    return tuple(specs)


def _faults_from(data: Mapping[str, Any], where: str) -> Faults:
    return Faults(
        offline_nodes=_patterns(data.get("offline_nodes", ()), f"{where}.offline_nodes"),
        clone_failure_rate=_rate(data.get("clone_failure_rate", 0.0), "clone_failure_rate"),
        clone_fails_for=_patterns(data.get("clone_fails_for", ()), "clone_fails_for"),
        agent_never_answers=_patterns(data.get("agent_never_answers", ()), "agent_never_answers"),
        oobe_never_finishes=_patterns(data.get("oobe_never_finishes", ()), "oobe_never_finishes"),
        ignores_shutdown=_patterns(data.get("ignores_shutdown", ()), "ignores_shutdown"),
    )
