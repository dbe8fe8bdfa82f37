"""Session recordings (``recordings:read``, held by ``platform:admin`` and nobody else by default).

A pool whose session policy has ``recording.enabled`` has its sessions recorded by the gateway:
the Guacamole instruction stream the desktop showed, as guacd writes its own recordings, which
``Guacamole.SessionRecording`` of guacamole-common-js plays. ``GET /api/v1/recordings`` lists
them (filters: pool, user, session, period); ``GET /api/v1/recordings/{id}/download`` streams
one, opened chunk by chunk from its sealed store, and honours a single ``Range``. Every
download (a playback is one) is audited as ``recording.download``, and is registered with the
access watch (:mod:`deskpool.api.streams`): it is cut once its reader loses ``recordings:read``.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from aiohttp import web
from marshmallow import Schema, fields

from deskpool.api.context import Call
from deskpool.api.pagination import Page, PageQuery, page_schema, paginate
from deskpool.api.problems import PROBLEM_CONTENT_TYPE, ProblemSchema
from deskpool.api.resources.sessions import time_id_cursor
from deskpool.api.routes import ResponseSpec, RouteTable
from deskpool.api.streams import guarded
from deskpool.api.values import Instant
from deskpool.ids import parse_id
from deskpool.recordings import service, store
from deskpool.recordings.model import Recording
from deskpool.revocation.model import Holding

log = logging.getLogger(__name__)

#: The media type of a recording: the Guacamole protocol's text stream.
RECORDING_CONTENT_TYPE = "application/vnd.deskpool.guacamole-recording"


class RecordingSchema(Schema):
    """One session's recording."""

    id = fields.String(required=True)
    session_id = fields.String(required=True)
    pool_id = fields.String(required=True)
    user_id = fields.String(required=True)
    desktop_name = fields.String(required=True)
    include_keys = fields.Boolean(
        required=True, metadata={"description": "The user's key events are in the recording."}
    )
    started_at = fields.AwareDateTime(required=True)
    ended_at = fields.AwareDateTime(
        required=True,
        allow_none=True,
        metadata={"description": "Null while the session is recorded."},
    )
    size_bytes = fields.Integer(
        required=True, metadata={"description": "Bytes of the recording (what a download sends)."}
    )
    chunks = fields.Integer(required=True, metadata={"description": "Chunks written so far."})
    truncated = fields.Boolean(
        required=True,
        metadata={
            "description": "Recording stopped before the session ended (the store fell behind)."
        },
    )


class RecordingQuery(PageQuery):
    """Filters of the recording list."""

    pool_id = fields.UUID(metadata={"description": "Only recordings of this pool's sessions."})
    user_id = fields.UUID(metadata={"description": "Only this user's sessions."})
    session_id = fields.UUID(metadata={"description": "Only this session's recording."})
    since = Instant(metadata={"description": "Sessions started at or after this."})
    until = Instant(metadata={"description": "Sessions started before this."})


def recording_view(recording: Recording) -> dict[str, Any]:
    """A recording as the API shows it."""
    return {
        "id": str(recording.id),
        "session_id": str(recording.session_id),
        "pool_id": str(recording.pool_id),
        "user_id": str(recording.user_id),
        "desktop_name": recording.desktop_name,
        "include_keys": recording.include_keys,
        "started_at": recording.started_at,
        "ended_at": recording.ended_at,
        "size_bytes": recording.size_bytes,
        "chunks": recording.chunks,
        "truncated": recording.truncated,
    }


def _cursor(recording: Recording) -> list[str]:
    return [recording.started_at.isoformat(), str(recording.id)]


def _recording_id(call: Call) -> uuid.UUID:
    return parse_id(call.path_param("recording_id"), "recording")


ROUTES = RouteTable()

#: The permission that reads recordings, and keeps a download going.
READ = "recordings:read"


def _keeps_reading(holding: Holding) -> bool:
    """A download goes on while its reader is enabled and holds ``recordings:read``."""
    return holding.keeps_permission(READ)


@ROUTES.route(
    "GET",
    "/api/v1/recordings",
    summary="List session recordings",
    description="Newest first; filter by pool, user, session and the period they started in.",
    tags=("recordings",),
    permission="recordings:read",
    query=RecordingQuery,
    paginated=True,
    responses={200: ResponseSpec("A page of recordings.", page_schema(RecordingSchema))},
)
async def list_recordings(call: Call) -> Page:
    query = call.query
    limit = int(query["limit"])
    where = store.RecordingFilter(
        pool_id=query.get("pool_id"),
        user_id=query.get("user_id"),
        session_id=query.get("session_id"),
        started_after=query.get("since"),
        started_before=query.get("until"),
    )
    records = await service.list_recordings(
        call.runtime, where, limit=limit + 1, after=time_id_cursor(query.get("cursor"))
    )
    page = paginate(records, limit, _cursor)
    return Page([recording_view(record) for record in page.items], page.next)


@ROUTES.route(
    "GET",
    "/api/v1/recordings/{recording_id}",
    summary="Get a session recording",
    tags=("recordings",),
    permission="recordings:read",
    responses={200: ResponseSpec("The recording.", RecordingSchema)},
)
async def get_recording(call: Call) -> dict[str, Any]:
    return recording_view(await service.get_recording(call.runtime, _recording_id(call)))


@ROUTES.route(
    "GET",
    "/api/v1/recordings/{recording_id}/download",
    summary="Download (play) a session recording",
    description=(
        "The recording's Guacamole instruction stream, as guacd writes its recordings "
        "(`Guacamole.SessionRecording` plays it). A single `Range: bytes=...` is honoured "
        "(206 with `Content-Range`; 416 past the end). Audited as `recording.download`. The "
        "download is cut (the connection reset) within seconds of the caller losing "
        "`recordings:read` or being disabled."
    ),
    tags=("recordings",),
    permission="recordings:read",
    responses={
        200: ResponseSpec("The whole recording.", content_type=RECORDING_CONTENT_TYPE),
        206: ResponseSpec(
            "The range asked for.",
            content_type=RECORDING_CONTENT_TYPE,
            headers={"Content-Range": "`bytes start-end/total`."},
        ),
        416: ResponseSpec(
            "The range starts past the end (`range_not_satisfiable`, `Content-Range: bytes */n`).",
            ProblemSchema,
            content_type=PROBLEM_CONTENT_TYPE,
        ),
    },
)
async def download_recording(call: Call) -> web.StreamResponse:
    request = call.request
    recording, wanted = await service.open_download(
        call.runtime, _recording_id(call), request.headers.get("Range"), call.actor
    )
    headers = {
        "Content-Type": RECORDING_CONTENT_TYPE,
        "Accept-Ranges": "bytes",
        "Cache-Control": "no-store",
        "Content-Disposition": f'attachment; filename="{recording.id}.guac"',
    }
    if wanted is None:
        response = web.StreamResponse(status=200, headers=headers)
        response.content_length = recording.size_bytes
    else:
        headers["Content-Range"] = f"bytes {wanted.start}-{wanted.end}/{wanted.total}"
        response = web.StreamResponse(status=206, headers=headers)
        response.content_length = wanted.length
    await response.prepare(request)

    async def send() -> bool:
        """Write the bytes asked for; whether the body went out whole."""
        try:
            async for data in service.chunks(call.runtime, recording, wanted):
                await response.write(data)
        except service.RecordingGone:
            # The status is sent: break the body off (shorter than its Content-Length), so the
            # client sees an incomplete download rather than waiting for the rest.
            log.info("recording %s was deleted while it was downloaded: cut short", recording.id)
            if request.transport is not None:
                request.transport.close()
            return False
        except ConnectionResetError:  # aiohttp's ClientConnectionResetError is one
            log.info("the client left the download of recording %s", recording.id)
            return False
        return True

    # Within seconds of the caller losing recordings:read (or being disabled), the download ends.
    finished, whole = await guarded(call, "recording_download", _keeps_reading, send)
    if finished and whole:
        await response.write_eof()
    return response
