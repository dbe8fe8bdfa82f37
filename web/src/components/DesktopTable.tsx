/**
 * Desktops with their pool, state, user, failure and the actions they allow now; several can be
 * chosen for one action. An action that disrupts someone (power off, restart, rebuild, delete of
 * a desktop a user has) asks first, naming the users it affects, with an optional message to
 * them that their desktop views show before it is done.
 */
import { useMutation, useQueryClient } from "@tanstack/react-query";
import { unwrap, type Schemas } from "../api/client";
import { pageSize, useCursorList } from "../api/lists";
import { can } from "../auth/permissions";
import { sentence, when, words } from "../format";
import { useSession } from "../session";
import { Badge } from "./Badge";
import { useConfirm, useSelection, type Question } from "./Confirm";
import { DataTable, type Column } from "./DataTable";
import { PoolName, UserName } from "./Names";
import { ProblemAlert } from "./Problem";

type Desktop = Schemas["Desktop"];
type Action = Schemas["DesktopAction"]["action"];

/** What an action does to a desktop, said before it is done. */
const EFFECT: Record<Action, string> = {
  power_on: "starts its VM",
  power_off: "turns its VM off: whoever uses it loses the desktop and any unsaved work",
  restart: "restarts its VM: whoever uses it loses the desktop and any unsaved work",
  rebuild: "replaces its disk with the pool's template: whatever was on it is lost",
  delete: "deletes its VM and the desktop: whatever was on it is lost",
};

/** Actions that need no confirmation when nobody has the desktop. */
const HARMLESS: Action[] = ["power_on", "power_off", "restart"];

function userOf(desktop: Desktop): string | null {
  if (!desktop.assigned_user) return null;
  return desktop.assigned_user_name || desktop.assigned_user_email || "an unknown user";
}

/** A bulk action's button: "Power off 4 selected". */
export function bulkLabel(action: Action, count: number): string {
  return `${sentence(action)} ${count} selected`;
}

/** The question before `action` on `desktops`; `null` when nothing needs confirming. */
export function questionFor(action: Action, desktops: Desktop[]): Question | null {
  const used = desktops.filter((desktop) => desktop.in_session || desktop.assigned_user);
  if (!used.length && HARMLESS.includes(action)) return null;
  const what = desktops.length === 1 ? desktops[0]!.name : `${desktops.length} desktops`;
  return {
    title: `${words(action)} ${what}?`,
    body: (
      <>
        <p>
          This {EFFECT[action]}.
        </p>
        {used.length ? (
          <>
            <p>{used.length === 1 ? "It is used by:" : "They are used by:"}</p>
            <ul>
              {used.map((desktop) => (
                <li key={desktop.id}>
                  {userOf(desktop) ?? "a user"} on {desktop.name}
                  {desktop.in_session ? " (connected now)" : ""}
                </li>
              ))}
            </ul>
          </>
        ) : (
          <p>Nobody uses {desktops.length === 1 ? "it" : "them"} now.</p>
        )}
      </>
    ),
    confirm: `${words(action)} ${what}`,
    messageTo: usersNamed(used),
  };
}

/** Whom a message goes to: "Desk User", "Desk User and Ann Other", or undefined for nobody. */
function usersNamed(used: Desktop[]): string | undefined {
  const names = [...new Set(used.filter((desktop) => desktop.assigned_user).map((desktop) => userOf(desktop)!))];
  if (!names.length) return undefined;
  return names.length === 1 ? names[0] : `${names.slice(0, -1).join(", ")} and ${names[names.length - 1]}`;
}

function Actions({ desktop, onAction }: { desktop: Desktop; onAction: (desktops: Desktop[], action: Action) => void }) {
  return (
    <div className="row-actions" role="group" aria-label={`Actions for ${desktop.name}`}>
      {desktop.allowed_actions.map((action) => (
        <button key={action} type="button" className="secondary outline small" onClick={() => onAction([desktop], action)}>
          {words(action)}
        </button>
      ))}
    </div>
  );
}

export function DesktopTable({
  poolId,
  state,
  userId,
  showPool = true,
}: {
  poolId?: string;
  state?: Desktop["state"];
  userId?: string;
  showPool?: boolean;
}) {
  const { api, me } = useSession();
  const client = useQueryClient();
  const list = useCursorList(["desktops", poolId ?? "all", state ?? "any", userId ?? "anyone"], (cursor) =>
    unwrap(
      api.GET("/api/v1/desktops", {
        params: { query: { limit: pageSize(cursor), cursor, pool_id: poolId, state, assigned_user: userId } },
      }),
    ),
  );
  const act = useMutation({
    mutationFn: ({ desktops, action, message }: { desktops: Desktop[]; action: Action; message: string }) =>
      Promise.all(
        desktops.map((desktop) =>
          unwrap(
            api.POST("/api/v1/desktops/{desktop_id}/actions", {
              params: { path: { desktop_id: desktop.id } },
              body: { action, message: message || null },
            }),
          ),
        ),
      ),
    onSettled: () => void client.invalidateQueries({ queryKey: ["desktops"] }),
  });
  const [dialog, ask] = useConfirm();
  const selection = useSelection();
  const run = async (desktops: Desktop[], action: Action) => {
    const allowed = desktops.filter((desktop) => desktop.allowed_actions.includes(action));
    if (!allowed.length) return;
    const question = questionFor(action, allowed);
    const answer = question ? await ask(question) : { message: "" };
    if (!answer) return;
    act.mutate({ desktops: allowed, action, message: answer.message });
    selection.clear();
  };
  const manage = can(me, "desktops:manage");
  const chosen = list.rows.filter((desktop) => selection.chosen.has(desktop.id));
  const bulkActions = (["power_on", "power_off", "restart", "rebuild", "delete"] as Action[]).filter((action) =>
    chosen.some((desktop) => desktop.allowed_actions.includes(action)),
  );
  const columns: Column<Desktop>[] = [];
  if (manage) {
    columns.push({
      header: "Select",
      className: "select-cell",
      cell: (desktop) => (
        <input
          type="checkbox"
          aria-label={`Select ${desktop.name}`}
          checked={selection.chosen.has(desktop.id)}
          onChange={(event) => selection.toggle(desktop.id, event.target.checked)}
        />
      ),
    });
  }
  columns.push({ header: "Name", cell: (desktop) => desktop.name });
  if (showPool) columns.push({ header: "Pool", cell: (desktop) => <PoolName id={desktop.pool_id} name={desktop.pool_name} /> });
  columns.push(
    { header: "State", cell: (desktop) => <Badge value={desktop.state} /> },
    {
      header: "User",
      cell: (desktop) => (
        <UserName id={desktop.assigned_user} name={desktop.assigned_user_name} email={desktop.assigned_user_email} />
      ),
    },
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
  );
  if (manage) {
    columns.push({
      header: "Actions",
      cell: (desktop) => <Actions desktop={desktop} onAction={(desktops, action) => void run(desktops, action)} />,
    });
  }
  return (
    <>
      {manage ? (
        <div className="toolbar" role="group" aria-label="Selected desktops">
          <button type="button" className="secondary outline small" onClick={() => selection.setAll(list.rows.map((d) => d.id))}>
            Select all
          </button>
          <button type="button" className="secondary outline small" disabled={!chosen.length} onClick={selection.clear}>
            Clear selection
          </button>
          {bulkActions.map((action) => (
            <button key={action} type="button" className="small" onClick={() => void run(chosen, action)}>
              {bulkLabel(action, chosen.length)}
            </button>
          ))}
        </div>
      ) : null}
      <ProblemAlert error={list.error ?? act.error} />
      {dialog}
      <DataTable caption="Desktops" columns={columns} {...list.table} rowKey={(desktop) => desktop.id} empty="No desktop yet." />
    </>
  );
}
