/** Sessions: open and recent remote desktop connections; disconnect one, or watch it read-only. */
import { useMutation, useQueryClient } from "@tanstack/react-query";
import { useState } from "react";
import { Link, useNavigate } from "react-router";
import { unwrap, type Schemas } from "../api/client";
import { pageSize, useCursorList } from "../api/lists";
import { can } from "../auth/permissions";
import { Badge } from "../components/Badge";
import { DataTable } from "../components/DataTable";
import { SelectField } from "../components/Field";
import { ProblemAlert } from "../components/Problem";
import { when, words } from "../format";
import { useSession } from "../session";

type Session = Schemas["Session"];

export function SessionsPage() {
  const { api, me } = useSession();
  const client = useQueryClient();
  const [state, setState] = useState<Session["state"] | "">("open");
  const list = useCursorList(["sessions", state], (cursor) =>
    unwrap(api.GET("/api/v1/sessions", { params: { query: { limit: pageSize(cursor), cursor, state: state || undefined } } })),
  );
  const disconnect = useMutation({
    mutationFn: (session: Session) =>
      unwrap(api.POST("/api/v1/sessions/{session_id}/disconnect", { params: { path: { session_id: session.id } } })),
    onSettled: () => void client.invalidateQueries({ queryKey: ["sessions"] }),
  });
  const manage = can(me, "sessions:manage");
  const navigate = useNavigate();
  // The viewer's token is asked by the desktop view (again on every reconnect).
  const watch = (s: Session) => navigate(`/desktop/${s.desktop_id}?watch=${s.id}`);
  return (
    <section>
      <h1>Sessions</h1>
      <div className="filters">
        <SelectField label="State" value={state} onChange={(e) => setState(e.target.value as Session["state"] | "")}>
          <option value="open">Open</option>
          <option value="ended">Ended</option>
          <option value="">All</option>
        </SelectField>
      </div>
      <ProblemAlert error={list.error ?? disconnect.error} />
      <DataTable
        caption="Sessions"
        {...list.table}
        rowKey={(s) => s.id}
        empty={state === "open" ? "No open session." : "No session."}
        columns={[
          { header: "Desktop", cell: (s) => <Link to={`/sessions/${s.id}`}>{s.desktop_name}</Link> },
          { header: "User", cell: (s) => s.user_id },
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
                    onClick={() => disconnect.mutate(s)}
                  >
                    Disconnect {s.desktop_name}
                  </button>{" "}
                  {s.read_only ? null : (
                    <button
                      type="button"
                      className="secondary outline small"
                      disabled={!s.connected_at}
                      onClick={() => watch(s)}
                    >
                      Watch {s.desktop_name}
                    </button>
                  )}
                </>
              ) : null,
          },
        ]}
      />
    </section>
  );
}
