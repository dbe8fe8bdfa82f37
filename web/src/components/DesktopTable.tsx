/** Desktops with their state, user, failure and the actions they allow now. */
import { useMutation, useQueryClient } from "@tanstack/react-query";
import { unwrap, type Schemas } from "../api/client";
import { pageSize, useCursorList } from "../api/lists";
import { can } from "../auth/permissions";
import { when, words } from "../format";
import { useSession } from "../session";
import { Badge } from "./Badge";
import { DataTable, type Column } from "./DataTable";
import { ProblemAlert } from "./Problem";

type Desktop = Schemas["Desktop"];
type Action = Schemas["DesktopAction"]["action"];

const CONFIRM: Partial<Record<Action, string>> = {
  delete: "Delete this desktop and its VM?",
  rebuild: "Rebuild this desktop from its template? Its disk is replaced.",
};

function Actions({ desktop, onAction }: { desktop: Desktop; onAction: (desktop: Desktop, action: Action) => void }) {
  return (
    <div className="row-actions" role="group" aria-label={`Actions for ${desktop.name}`}>
      {desktop.allowed_actions.map((action) => (
        <button
          key={action}
          type="button"
          className="secondary outline small"
          onClick={() => {
            const question = CONFIRM[action];
            if (!question || window.confirm(question)) onAction(desktop, action);
          }}
        >
          {words(action)}
        </button>
      ))}
    </div>
  );
}

export function DesktopTable({ poolId, state }: { poolId?: string; state?: Desktop["state"] }) {
  const { api, me } = useSession();
  const client = useQueryClient();
  const list = useCursorList(["desktops", poolId ?? "all", state ?? "any"], (cursor) =>
    unwrap(
      api.GET("/api/v1/desktops", {
        params: { query: { limit: pageSize(cursor), cursor, pool_id: poolId, state } },
      }),
    ),
  );
  const act = useMutation({
    mutationFn: ({ desktop, action }: { desktop: Desktop; action: Action }) =>
      unwrap(
        api.POST("/api/v1/desktops/{desktop_id}/actions", {
          params: { path: { desktop_id: desktop.id } },
          body: { action },
        }),
      ),
    onSettled: () => void client.invalidateQueries({ queryKey: ["desktops"] }),
  });
  const manage = can(me, "desktops:manage");
  const columns: Column<Desktop>[] = [
    { header: "Name", cell: (desktop) => desktop.name },
    { header: "State", cell: (desktop) => <Badge value={desktop.state} /> },
    { header: "User", cell: (desktop) => desktop.assigned_user ?? "—" },
    { header: "Session", cell: (desktop) => (desktop.in_session ? "connected" : "—") },
    { header: "Node", cell: (desktop) => desktop.node ?? "—" },
    {
      header: "Last error",
      cell: (desktop) =>
        desktop.last_error ? (
          <span className="error-text" title={when(desktop.last_failed_at)}>
            {desktop.failed_step ? `${words(desktop.failed_step)}: ` : ""}
            {desktop.last_error}
          </span>
        ) : (
          "—"
        ),
    },
  ];
  if (manage) {
    columns.push({
      header: "Actions",
      cell: (desktop) => <Actions desktop={desktop} onAction={(d, action) => act.mutate({ desktop: d, action })} />,
    });
  }
  return (
    <>
      <ProblemAlert error={list.error ?? act.error} />
      <DataTable
        caption="Desktops"
        columns={columns}
        {...list.table}
        rowKey={(desktop) => desktop.id}
        empty="No desktop yet."
      />
    </>
  );
}
