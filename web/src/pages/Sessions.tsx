/**
 * Sessions: open and recent remote desktop connections, searchable by user and filterable by
 * pool; disconnect one or several or log one off (after a confirmation naming their users, with an
 * optional message to them), or watch one.
 */
import { useCallback, useState } from "react";
import { Link, useNavigate } from "react-router";
import { unwrap, type Schemas } from "../api/client";
import { pageSize, useCursorList } from "../api/lists";
import { can } from "../auth/permissions";
import { Badge } from "../components/Badge";
import { useSelection } from "../components/Confirm";
import { DataTable, type Column } from "../components/DataTable";
import { SelectField } from "../components/Field";
import { PoolFilter, UserFilter } from "../components/Filters";
import { PoolName, UserName } from "../components/Names";
import { ProblemAlert } from "../components/Problem";
import { disconnectable as open, sessionWho, useSessionActions } from "../components/SessionActions";
import { when, words } from "../format";
import { useSession } from "../session";

type Session = Schemas["Session"];

export function SessionsPage() {
  const { api, me } = useSession();
  const [state, setState] = useState<Session["state"] | "">("open");
  const [poolId, setPoolId] = useState("");
  const [userId, setUserId] = useState<string | undefined>(undefined);
  const onUser = useCallback((id: string | undefined) => setUserId(id), []);
  const query = { state: state || undefined, pool_id: poolId || undefined, user_id: userId };
  const list = useCursorList(["sessions", query], (cursor) =>
    unwrap(api.GET("/api/v1/sessions", { params: { query: { limit: pageSize(cursor), cursor, ...query } } })),
  );
  const actions = useSessionActions();
  const selection = useSelection();
  const manage = can(me, "sessions:manage");
  const navigate = useNavigate();
  // The viewer's token is asked by the desktop view (again on every reconnect).
  const watch = (s: Session) => navigate(`/desktop/${s.desktop_id}?watch=${s.id}`);
  const askDisconnect = async (sessions: Session[]) => {
    if (await actions.askDisconnect(sessions)) selection.clear();
  };
  const disconnectable = (s: Session) => manage && open(s);
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
          <div className="row-actions" role="group" aria-label={`Actions for ${sessionWho(s)}`}>
            <button
              type="button"
              className="secondary outline small"
              disabled={Boolean(s.disconnect_requested_at)}
              onClick={() => void askDisconnect([s])}
            >
              Disconnect {s.desktop_name}
            </button>
            {s.read_only ? null : (
              <>
                <button type="button" className="secondary outline small" onClick={() => void actions.askLogOff(s)}>
                  Log off {s.desktop_name}
                </button>
                <button type="button" className="secondary outline small" disabled={!s.connected_at} onClick={() => watch(s)}>
                  Watch {s.desktop_name}
                </button>
              </>
            )}
          </div>
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
      <ProblemAlert error={list.error ?? actions.error} />
      {actions.dialog}
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
