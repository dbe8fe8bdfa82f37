/**
 * Sessions: open and recent remote desktop connections, searchable by user and filterable by
 * pool; disconnect one or several (after a confirmation naming their users), or watch one.
 */
import { useMutation, useQueryClient } from "@tanstack/react-query";
import { useCallback, useState } from "react";
import { Link, useNavigate } from "react-router";
import { unwrap, type Schemas } from "../api/client";
import { pageSize, useCursorList } from "../api/lists";
import { can } from "../auth/permissions";
import { Badge } from "../components/Badge";
import { useConfirm, useSelection } from "../components/Confirm";
import { DataTable, type Column } from "../components/DataTable";
import { SelectField } from "../components/Field";
import { PoolFilter, UserFilter } from "../components/Filters";
import { PoolName, UserName } from "../components/Names";
import { ProblemAlert } from "../components/Problem";
import { when, words } from "../format";
import { useSession } from "../session";

type Session = Schemas["Session"];

/** "Desk User (np-01)" for a confirmation. */
export function sessionWho(s: Session): string {
  return `${s.user_name || s.user_email || "an unknown user"} on ${s.desktop_name}`;
}

export function SessionsPage() {
  const { api, me } = useSession();
  const client = useQueryClient();
  const [state, setState] = useState<Session["state"] | "">("open");
  const [poolId, setPoolId] = useState("");
  const [userId, setUserId] = useState<string | undefined>(undefined);
  const onUser = useCallback((id: string | undefined) => setUserId(id), []);
  const query = { state: state || undefined, pool_id: poolId || undefined, user_id: userId };
  const list = useCursorList(["sessions", query], (cursor) =>
    unwrap(api.GET("/api/v1/sessions", { params: { query: { limit: pageSize(cursor), cursor, ...query } } })),
  );
  const disconnect = useMutation({
    mutationFn: (sessions: Session[]) =>
      Promise.all(
        sessions.map((session) =>
          unwrap(api.POST("/api/v1/sessions/{session_id}/disconnect", { params: { path: { session_id: session.id } } })),
        ),
      ),
    onSettled: () => void client.invalidateQueries({ queryKey: ["sessions"] }),
  });
  const [dialog, ask] = useConfirm();
  const selection = useSelection();
  const manage = can(me, "sessions:manage");
  const navigate = useNavigate();
  // The viewer's token is asked by the desktop view (again on every reconnect).
  const watch = (s: Session) => navigate(`/desktop/${s.desktop_id}?watch=${s.id}`);
  const askDisconnect = async (sessions: Session[]) => {
    if (!sessions.length) return;
    const confirmed = await ask({
      title: sessions.length === 1 ? `Disconnect ${sessions[0]!.user_name || "this user"}?` : `Disconnect ${sessions.length} sessions?`,
      body: (
        <>
          <p>These people lose their desktop's window now; their desktops keep running as the pool's session policy says:</p>
          <ul>
            {sessions.map((s) => (
              <li key={s.id}>{sessionWho(s)}</li>
            ))}
          </ul>
        </>
      ),
      confirm: sessions.length === 1 ? `Disconnect ${sessions[0]!.desktop_name}` : `Disconnect ${sessions.length} sessions`,
    });
    if (confirmed) {
      disconnect.mutate(sessions);
      selection.clear();
    }
  };
  const disconnectable = (s: Session) => manage && s.state === "open" && !s.disconnect_requested_at;
  const chosen = list.rows.filter((s) => selection.chosen.has(s.id) && disconnectable(s));
  const columns: Column<Session>[] = [];
  if (manage) {
    columns.push({
      header: "Select",
      className: "select-cell",
      cell: (s) =>
        disconnectable(s) ? (
          <input
            type="checkbox"
            aria-label={`Select ${sessionWho(s)}`}
            checked={selection.chosen.has(s.id)}
            onChange={(event) => selection.toggle(s.id, event.target.checked)}
          />
        ) : null,
    });
  }
  columns.push(
    { header: "Desktop", cell: (s) => <Link to={`/sessions/${s.id}`}>{s.desktop_name}</Link> },
    { header: "User", cell: (s) => <UserName id={s.user_id} name={s.user_name} email={s.user_email} /> },
    { header: "Pool", cell: (s) => <PoolName id={s.pool_id} name={s.pool_name} /> },
    { header: "State", cell: (s) => <Badge value={s.state} /> },
    { header: "Started", cell: (s) => when(s.started_at) },
    { header: "Last activity", cell: (s) => when(s.last_activity_at) },
    { header: "Ended", cell: (s) => (s.ended_at ? `${when(s.ended_at)} (${words(s.end_reason)})` : "—") },
    { header: "Kind", cell: (s) => (s.read_only ? "watching" : s.protocol) },
    {
      header: "Actions",
      cell: (s) =>
        manage && s.state === "open" ? (
          <>
            <button
              type="button"
              className="secondary outline small"
              disabled={Boolean(s.disconnect_requested_at)}
              onClick={() => void askDisconnect([s])}
            >
              Disconnect {s.desktop_name}
            </button>{" "}
            {s.read_only ? null : (
              <button type="button" className="secondary outline small" disabled={!s.connected_at} onClick={() => watch(s)}>
                Watch {s.desktop_name}
              </button>
            )}
          </>
        ) : null,
    },
  );
  return (
    <section>
      <h1>Sessions</h1>
      <div className="filters">
        <SelectField label="State" value={state} onChange={(e) => setState(e.target.value as Session["state"] | "")}>
          <option value="open">Open</option>
          <option value="ended">Ended</option>
          <option value="">All</option>
        </SelectField>
        <UserFilter onChange={onUser} />
        <PoolFilter value={poolId} onChange={setPoolId} />
      </div>
      {manage ? (
        <div className="toolbar" role="group" aria-label="Selected sessions">
          <button
            type="button"
            className="secondary outline small"
            onClick={() => selection.setAll(list.rows.filter(disconnectable).map((s) => s.id))}
          >
            Select all open
          </button>
          <button type="button" className="small" disabled={!chosen.length} onClick={() => void askDisconnect(chosen)}>
            Disconnect {chosen.length} selected
          </button>
        </div>
      ) : null}
      <ProblemAlert error={list.error ?? disconnect.error} />
      {dialog}
      <DataTable
        caption="Sessions"
        columns={columns}
        {...list.table}
        rowKey={(s) => s.id}
        empty={state === "open" ? "No open session." : "No session."}
      />
    </section>
  );
}
