/**
 * Session recordings (`recordings:read`): the list, filtered by pool, user, session and the
 * period they started in, and one recording's player with its session's facts beside it.
 */
import { useQuery } from "@tanstack/react-query";
import { useMemo, useState } from "react";
import { Link, useParams } from "react-router";
import { unwrap, type Schemas } from "../api/client";
import { pageSize, useCursorList } from "../api/lists";
import { can } from "../auth/permissions";
import { Badge } from "../components/Badge";
import { DataTable } from "../components/DataTable";
import { SelectField, TextField } from "../components/Field";
import { ProblemAlert } from "../components/Problem";
import { bytes, when, words } from "../format";
import { RecordingPlayer } from "../recordings/RecordingPlayer";
import { NO_FILTERS, recordedSeconds, recordingQuery, type RecordingFilters } from "../recordings/player";
import { useSession } from "../session";

type Recording = Schemas["Recording"];

function lasted(recording: Recording): string {
  const seconds = recordedSeconds(recording.started_at, recording.ended_at);
  if (seconds === null) return "recording";
  return seconds < 60 ? `${seconds.toFixed(0)} s` : `${(seconds / 60).toFixed(1)} min`;
}

/** The pools the caller may read, by id (for names and the pool filter). */
function usePools() {
  const { api, me } = useSession();
  return useQuery({
    queryKey: ["pools", "names"],
    enabled: can(me, "pools:read"),
    queryFn: () => unwrap(api.GET("/api/v1/pools", { params: { query: { limit: 500 } } })),
    select: (page) => new Map(page.items.map((pool) => [pool.id, pool.name])),
  });
}

export function RecordingsPage() {
  const { api } = useSession();
  const [filters, setFilters] = useState<RecordingFilters>(NO_FILTERS);
  const { query, errors } = useMemo(() => recordingQuery(filters), [filters]);
  const pools = usePools();
  const list = useCursorList(["recordings", query], (cursor) =>
    unwrap(api.GET("/api/v1/recordings", { params: { query: { limit: pageSize(cursor), cursor, ...query } } })),
  );
  const set = (key: keyof RecordingFilters) => (event: { target: { value: string } }) =>
    setFilters((current) => ({ ...current, [key]: event.target.value }));
  const poolName = (id: string) => pools.data?.get(id) ?? id;
  return (
    <section>
      <h1>Recordings</h1>
      <p>
        Sessions of pools whose session policy records them. Playing or saving a recording is recorded in the audit log.
      </p>
      <div className="filters grid">
        {pools.data ? (
          <SelectField label="Pool" value={filters.pool_id} onChange={set("pool_id")}>
            <option value="">Any pool</option>
            {[...pools.data].map(([id, name]) => (
              <option key={id} value={id}>
                {name}
              </option>
            ))}
          </SelectField>
        ) : (
          <TextField label="Pool id" value={filters.pool_id} onChange={set("pool_id")} error={errors.pool_id} />
        )}
        <TextField label="User id" value={filters.user_id} onChange={set("user_id")} error={errors.user_id} />
        <TextField label="Session id" value={filters.session_id} onChange={set("session_id")} error={errors.session_id} />
        <TextField label="From" type="datetime-local" value={filters.since} onChange={set("since")} error={errors.since} />
        <TextField label="Until" type="datetime-local" value={filters.until} onChange={set("until")} error={errors.until} />
      </div>
      <ProblemAlert error={list.error} />
      <DataTable
        caption="Recordings"
        {...list.table}
        rowKey={(r) => r.id}
        empty="No recording."
        columns={[
          { header: "Started", cell: (r) => when(r.started_at) },
          { header: "Desktop", cell: (r) => r.desktop_name },
          { header: "Pool", cell: (r) => poolName(r.pool_id) },
          { header: "User", cell: (r) => r.user_id },
          { header: "Length", cell: (r) => lasted(r) },
          { header: "Size", cell: (r) => bytes(r.size_bytes) },
          {
            header: "Recording",
            cell: (r) => (
              <>
                <Link to={`/recordings/${r.id}`}>Play {r.desktop_name}</Link>
                {r.truncated ? (
                  <>
                    {" "}
                    <Badge value="truncated" />
                  </>
                ) : null}
              </>
            ),
          },
        ]}
      />
    </section>
  );
}

function Facts({ recording }: { recording: Recording }) {
  const { api, me } = useSession();
  const pools = usePools();
  const session = useQuery({
    queryKey: ["sessions", recording.session_id],
    enabled: can(me, "sessions:read"),
    queryFn: () =>
      unwrap(api.GET("/api/v1/sessions/{session_id}", { params: { path: { session_id: recording.session_id } } })),
  });
  const user = useQuery({
    queryKey: ["users", recording.user_id],
    enabled: can(me, "users:read"),
    queryFn: () => unwrap(api.GET("/api/v1/users/{user_id}", { params: { path: { user_id: recording.user_id } } })),
  });
  const who = user.data ? user.data.display_name || user.data.email || user.data.subject : recording.user_id;
  const phases = session.data?.logon?.phases ?? [];
  return (
    <aside className="recording-facts" aria-label="Session">
      <dl>
        <dt>User</dt>
        <dd>{who}</dd>
        <dt>Pool</dt>
        <dd>{pools.data?.get(recording.pool_id) ?? recording.pool_id}</dd>
        <dt>Desktop</dt>
        <dd>{recording.desktop_name}</dd>
        <dt>Started</dt>
        <dd>{when(recording.started_at)}</dd>
        <dt>Ended</dt>
        <dd>
          {when(recording.ended_at)}
          {session.data?.end_reason ? ` (${words(session.data.end_reason)})` : ""}
        </dd>
        <dt>Size</dt>
        <dd>
          {bytes(recording.size_bytes)}, {recording.chunks} chunk{recording.chunks === 1 ? "" : "s"}
          {recording.truncated ? " (truncated: recording stopped before the session)" : ""}
        </dd>
        <dt>Key events</dt>
        <dd>{recording.include_keys ? "recorded" : "not recorded"}</dd>
        <dt>Session</dt>
        <dd>
          <code>{recording.session_id}</code>
        </dd>
      </dl>
      {phases.length ? (
        <table>
          <caption>Logon phases</caption>
          <thead>
            <tr>
              <th scope="col">Phase</th>
              <th scope="col">At</th>
              <th scope="col">Took</th>
            </tr>
          </thead>
          <tbody>
            {phases.map((phase) => (
              <tr key={phase.phase}>
                <td>{words(phase.phase)}</td>
                <td>{when(phase.at)}</td>
                <td>{phase.seconds.toFixed(2)} s</td>
              </tr>
            ))}
          </tbody>
        </table>
      ) : null}
    </aside>
  );
}

export function RecordingPage() {
  const { api } = useSession();
  const { recordingId = "" } = useParams();
  const recording = useQuery({
    queryKey: ["recordings", "one", recordingId],
    queryFn: () =>
      unwrap(api.GET("/api/v1/recordings/{recording_id}", { params: { path: { recording_id: recordingId } } })),
  });
  return (
    <section>
      <p>
        <Link to="/recordings">← Recordings</Link>
      </p>
      <h1>Recording {recording.data ? `of ${recording.data.desktop_name}` : ""}</h1>
      <ProblemAlert error={recording.error} />
      {recording.data ? (
        <div className="recording-layout">
          <RecordingPlayer recordingId={recording.data.id} />
          <Facts recording={recording.data} />
        </div>
      ) : (
        <p aria-busy={recording.isLoading ? "true" : undefined}>{recording.isLoading ? "Loading…" : null}</p>
      )}
    </section>
  );
}
