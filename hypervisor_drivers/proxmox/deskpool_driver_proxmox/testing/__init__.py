"""A fake Proxmox VE API for tests: an aiohttp server speaking ``/api2/json`` on 127.0.0.1.

:class:`FakeProxmox` implements the part of the Proxmox VE REST API the driver uses, the way
``pveproxy`` and ``qemu-server`` behave (checked against their sources):

- API token authentication (``Authorization: PVEAPIToken=USER@REALM!TOKENID=SECRET``):
  ``401 No ticket`` without it, ``401 invalid token value!`` with a wrong one,
  ``403 Permission check failed (/vms/ID, PRIV)`` for a token lacking a privilege;
- parameters from the query string and from form-encoded (or JSON) bodies, validated like
  the JSON schema of each method: ``400 Parameter verification failed.`` with
  ``{"errors": {"name": "why"}, "data": null}`` (a boolean is ``0`` or ``1``, nothing else);
  a body on ``GET`` is ``501``;
- every answer as ``{"data": ...}``; errors as a status whose reason phrase is the message,
  with ``{"data": null, "message": "..."}`` (the message ends with a newline);
  ``501 Method 'GET /x' not implemented`` for what does not exist;
- requests for a node that is down answer ``595`` with an empty body, as ``pveproxy`` does
  when it cannot proxy to that node;
- ``/version``, ``/nodes``, ``/cluster/status``, ``/cluster/nextid``, ``/cluster/resources``;
- QEMU VMs: ``config`` (``GET``, ``PUT``, ``POST``), ``clone`` (linked from templates by
  default, ``storage`` refused for linked clones, ``target`` only with shared storage; a
  clone to another node lives, locked, on the *source* node until its task ends and is then
  moved to the target, as ``qemu-server``'s ``clone_vm`` does),
  ``status/current``, ``status/start|stop|shutdown|reset``, ``DELETE`` (refused while
  running), with the ``lock`` a clone holds and the checks made before forking a task;
- asynchronous tasks with real UPIDs (``UPID:node:PID:PSTART:STARTTIME:type:id:user:``),
  ``/nodes/{node}/tasks/{upid}/status`` (``running`` then ``stopped`` with ``exitstatus``)
  and ``DELETE`` to stop a task;
- a guest agent per VM: ``ping``, ``network-get-interfaces``, ``get-osinfo``,
  ``get-host-name``, ``file-read`` (Windows ``State.ini``), with ``500 QEMU guest agent is
  not running`` while the guest boots and ``500 VM ID is not running`` when it is stopped.

The version reported (:data:`DEFAULT_VERSION`, or the one given) decides the privilege names
checked, as on a real cluster: ``VM.GuestAgent.*`` from 9 on, ``VM.Monitor`` before (see
:func:`privileges_for`).

Time runs for real but fast (see :class:`FakeTimings`); faults are injected through methods
(``set_node_online``, ``silence_agent``, ``lack_osinfo``, ``stall_oobe``, ``ignore_shutdown``,
``fail_next_clone``, ``steal_next_id``). Every request is recorded in ``requests`` and every
task started is put on the ``started_tasks`` queue. The fake serves plain HTTP, or HTTPS when
given an SSL context.
"""

from deskpool_driver_proxmox.testing.model import (
    ALL_PRIVILEGES,
    DEFAULT_VERSION,
    TOKEN_ID,
    TOKEN_SECRET,
    WINDOWS_STATE_FILE,
    ApiError,
    FakeNode,
    FakeStorage,
    FakeTask,
    FakeTimings,
    FakeToken,
    FakeVm,
    RecordedRequest,
    privileges_for,
)
from deskpool_driver_proxmox.testing.server import FakeProxmox

__all__ = [
    "ALL_PRIVILEGES",
    "DEFAULT_VERSION",
    "TOKEN_ID",
    "TOKEN_SECRET",
    "WINDOWS_STATE_FILE",
    "ApiError",
    "FakeNode",
    "FakeProxmox",
    "FakeStorage",
    "FakeTask",
    "FakeTimings",
    "FakeToken",
    "FakeVm",
    "RecordedRequest",
    "privileges_for",
]
