/**
 * The help desk: find a user by name, email or subject, then see on one page his sessions with
 * their logons, his failed logons, his desktops and, for every pool, whether he can open it and
 * why; and act: send him a message, disconnect or watch a session, log him off a desktop.
 */
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useUnsavedDraft } from "../components/Unsaved";
import { useConfirm } from "../components/Confirm";
import { useSessionActions } from "../components/SessionActions";
import { useState, type FormEvent } from "react";
import { Link, useNavigate, useParams } from "react-router";
import { unwrap, type Schemas } from "../api/client";
import { can } from "../auth/permissions";
import { Badge } from "../components/Badge";
import { SelectField, TextField } from "../components/Field";
import { fieldErrorsOf, ProblemAlert } from "../components/Problem";
import { when, words } from "../format";
import { useSession } from "../session";

type HelpdeskUser = Schemas["HelpdeskUser"];
type Found = Schemas["UserFound"];

function personName(user: { display_name?: string | null; email?: string | null; subject: string }): string {
  return user.display_name || user.email || user.subject;
}

export function HelpDeskSearchPage() {
  const { api } = useSession();
  const [text, setText] = useState("");
  const [asked, setAsked] = useState("");
  const found = useQuery({
    queryKey: ["helpdesk-search", asked],
    queryFn: () => unwrap(api.GET("/api/v1/helpdesk/users", { params: { query: { q: asked } } })),
    enabled: asked.length > 0,
  });
  const search = (event: FormEvent) => {
    event.preventDefault();
    setAsked(text.trim());
  };
  return (
    <section>
      <h1>Help desk</h1>
      <form role="search" className="filters" onSubmit={search}>
        <TextField
          label="Find a user"
          hint="Part of his name, email or subject."
          value={text}
          onChange={(e) => setText(e.target.value)}
        />
        <button type="submit" disabled={!text.trim()}>
          Search
        </button>
      </form>
      <ProblemAlert error={found.error} />
      {found.data ? (
        found.data.items.length ? (
          <ul className="helpdesk-results" aria-label="Users found">
            {found.data.items.map((user: Found) => (
              <li key={user.id}>
                <Link to={`/helpdesk/${user.id}`}>{personName(user)}</Link>{" "}
                <small>
                  {user.email ?? user.subject}
                  {user.disabled ? " · disabled" : ""} · last sign-in {when(user.last_seen_at)}
                </small>
              </li>
            ))}
          </ul>
        ) : (
          <p>No user matches “{asked}”.</p>
        )
      ) : null}
    </section>
  );
}

function MessageForm({ userId }: { userId: string }) {
  const { api } = useSession();
  const [body, setBody] = useState("");
  useUnsavedDraft(body);
  const [severity, setSeverity] = useState<"info" | "warning" | "urgent">("info");
  const send = useMutation({
    mutationFn: () =>
      unwrap(
        api.POST("/api/v1/messages", {
          body: { target_kind: "user", target_id: userId, severity, body },
        }),
      ),
    onSuccess: () => setBody(""),
  });
  const errors = fieldErrorsOf(send.error);
  return (
    <form
      className="helpdesk-message"
      aria-label="Send a message"
      onSubmit={(event) => {
        event.preventDefault();
        send.mutate();
      }}
    >
      <h2>Send him a message</h2>
      <SelectField label="Severity" value={severity} onChange={(e) => setSeverity(e.target.value as typeof severity)}>
        <option value="info">Information</option>
        <option value="warning">Warning</option>
        <option value="urgent">Urgent</option>
      </SelectField>
      <TextField
        label="Message"
        hint="Shown at once in his open desktops, and in those he opens within the hour."
        value={body}
        error={errors.body}
        onChange={(e) => setBody(e.target.value)}
      />
      <button type="submit" disabled={!body.trim() || send.isPending}>
        Send
      </button>
      {send.isSuccess ? (
        <p role="status" data-testid="message-sent">
          Sent.
        </p>
      ) : null}
      {send.error && !errors.body ? <ProblemAlert error={send.error} /> : null}
    </form>
  );
}

export function HelpDeskUserPage() {
  const { userId = "" } = useParams();
  const { api, me } = useSession();
  const client = useQueryClient();
  const navigate = useNavigate();
  const page = useQuery({
    queryKey: ["helpdesk-user", userId],
    queryFn: () => unwrap(api.GET("/api/v1/helpdesk/users/{user_id}", { params: { path: { user_id: userId } } })),
  });
  const refresh = () => void client.invalidateQueries({ queryKey: ["helpdesk-user", userId] });
  const logOff = useMutation({
    mutationFn: ({ desktopId, message }: { desktopId: string; message: string }) =>
      unwrap(
        api.POST("/api/v1/helpdesk/users/{user_id}/desktops/{desktop_id}/logoff", {
          params: { path: { user_id: userId, desktop_id: desktopId } },
          body: { message: message || null },
        }),
      ),
    onSettled: refresh,
  });
  // Restart (a reboot: his session is kept and comes back) and power off (his desktop stops;
  // he is logged off as when he logs off himself), as the desktops page runs them.
  const desktopAction = useMutation({
    mutationFn: ({ desktopId, action, message }: { desktopId: string; action: "restart" | "power_off"; message: string }) =>
      unwrap(
        api.POST("/api/v1/desktops/{desktop_id}/actions", {
          params: { path: { desktop_id: desktopId } },
          body: { action, message: message || null },
        }),
      ),
    onSettled: refresh,
  });
  // Every action that disrupts him asks first, naming him, with an optional message to him.
  const [dialog, ask] = useConfirm();
  const sessionActions = useSessionActions();
  const manage = can(me, "sessions:manage");
  const manageDesktops = can(me, "desktops:manage");
  if (page.error) return <ProblemAlert error={page.error} />;
  if (!page.data) return <p aria-busy="true">Loading…</p>;
  const data: HelpdeskUser = page.data;
  const user = data.user;
  const name = personName(user);
  return (
    <section className="helpdesk">
      <p>
        <Link to="/helpdesk">Help desk</Link>
      </p>
      <h1>{name}</h1>
      <p>
        <span title={user.id}>{user.email ?? user.subject}</span> · {user.disabled ? <Badge value="disabled" /> : "enabled"}{" "}
        · last sign-in {when(user.last_seen_at)}
        {data.groups.length ? <> · groups: {data.groups.map((g) => `${g.key} (${g.via === "claim" ? "by claim" : "member"})`).join(", ")}</> : null}
      </p>
      <ProblemAlert error={logOff.error ?? sessionActions.error ?? desktopAction.error} />
      {dialog}
      {sessionActions.dialog}

      <h2>Pools</h2>
      <table data-testid="helpdesk-pools">
        <caption>Can {name} open each pool?</caption>
        <thead>
          <tr>
            <th scope="col">Pool</th>
            <th scope="col">Can open</th>
            <th scope="col">Why</th>
            <th scope="col">Entitled through</th>
          </tr>
        </thead>
        <tbody>
          {data.pools.map((pool) => (
            <tr key={pool.pool_id} data-access={pool.access}>
              <td>
                <Link to={`/pools/${pool.pool_id}`}>{pool.pool_name}</Link>
              </td>
              <td>{pool.can_open ? "Yes" : "No"}</td>
              <td>{pool.explanation}</td>
              <td>
                {pool.paths.length
                  ? pool.paths
                      .map((path) =>
                        path.kind === "direct"
                          ? "direct entitlement"
                          : path.kind === "permission"
                            ? "pools:manage permission"
                            : `group ${path.group_key}${path.kind === "claim" ? " (claim binding)" : ""}`,
                      )
                      .join(", ")
                  : "—"}
              </td>
            </tr>
          ))}
        </tbody>
      </table>

      <h2>Desktops</h2>
      {data.desktops.length ? (
        <table>
          <caption>Desktops {name} holds</caption>
          <thead>
            <tr>
              <th scope="col">Desktop</th>
              <th scope="col">Pool</th>
              <th scope="col">State</th>
              <th scope="col">Actions</th>
            </tr>
          </thead>
          <tbody>
            {data.desktops.map((desktop) => (
              <tr key={desktop.id}>
                <td>{desktop.name}</td>
                <td>{desktop.pool_name ?? "—"}</td>
                <td>
                  <Badge value={desktop.state} />
                  {desktop.in_session ? " · connected" : ""}
                </td>
                <td>
                  {manage ? (
                    <button
                      type="button"
                      className="secondary outline small"
                      disabled={logOff.isPending}
                      onClick={() =>
                        void ask({
                          title: `Log ${name} off ${desktop.name}?`,
                          body: <p>His programs are closed and any unsaved work in them is lost.</p>,
                          confirm: `Log off ${desktop.name}`,
                          messageTo: name,
                        }).then((answer) => answer && logOff.mutate({ desktopId: desktop.id, message: answer.message }))
                      }
                    >
                      Log {name} off {desktop.name}
                    </button>
                  ) : null}{" "}
                  {manageDesktops
                    ? (["restart", "power_off"] as const).map((action) => (
                        <button
                          key={action}
                          type="button"
                          className="secondary outline small"
                          disabled={desktopAction.isPending}
                          onClick={() => {
                            const what = action === "restart" ? "Restart" : "Power off";
                            void ask({
                              title: `${what} ${desktop.name}, the desktop ${name} is using?`,
                              body: (
                                <p>
                                  {name} loses the desktop's window{action === "restart" ? " until it is back" : ""} and any
                                  unsaved work on it.
                                </p>
                              ),
                              confirm: `${what} ${desktop.name}`,
                              messageTo: name,
                            }).then(
                              (answer) =>
                                answer && desktopAction.mutate({ desktopId: desktop.id, action, message: answer.message }),
                            );
                          }}
                        >
                          {action === "restart" ? "Restart" : "Power off"} {desktop.name}
                        </button>
                      ))
                    : null}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      ) : (
        <p>He holds no desktop.</p>
      )}

      <h2>Sessions</h2>
      {data.sessions.length ? (
        <table>
          <caption>The latest sessions of {name}</caption>
          <thead>
            <tr>
              <th scope="col">Desktop</th>
              <th scope="col">Pool</th>
              <th scope="col">State</th>
              <th scope="col">Started</th>
              <th scope="col">Logon</th>
              <th scope="col">Ended</th>
              <th scope="col">Actions</th>
            </tr>
          </thead>
          <tbody>
            {data.sessions.map((session) => (
              <tr key={session.id}>
                <td>
                  <Link to={`/sessions/${session.id}`}>{session.desktop_name}</Link>
                </td>
                <td>{session.pool_name ?? "—"}</td>
                <td>
                  <Badge value={session.state} />
                </td>
                <td>{when(session.started_at)}</td>
                <td>
                  {session.logon?.duration_seconds != null
                    ? `${session.logon.duration_seconds.toFixed(1)} s to the first frame`
                    : words(session.logon?.outcome)}
                </td>
                <td>{session.ended_at ? `${when(session.ended_at)} (${words(session.end_reason)})` : "—"}</td>
                <td>
                  {manage && session.state === "open" ? (
                    <>
                      <button
                        type="button"
                        className="secondary outline small"
                        disabled={Boolean(session.disconnect_requested_at)}
                        onClick={() => void sessionActions.askDisconnect([session])}
                      >
                        Disconnect {session.desktop_name}
                      </button>{" "}
                      {session.read_only ? null : (
                        <button
                          type="button"
                          className="secondary outline small"
                          disabled={!session.connected_at}
                          onClick={() => navigate(`/desktop/${session.desktop_id}?watch=${session.id}`)}
                        >
                          Watch {session.desktop_name}
                        </button>
                      )}
                    </>
                  ) : null}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      ) : (
        <p>No session yet.</p>
      )}

      <h2>Failed logons</h2>
      {data.failed_logons.length ? (
        <ul data-testid="helpdesk-failed-logons">
          {data.failed_logons.map((logon) => (
            <li key={logon.id}>
              {when(logon.failed_at)}: {logon.pool_name ?? "a pool since deleted"}, {words(logon.failure_reason)}
            </li>
          ))}
        </ul>
      ) : (
        <p>No failed logon.</p>
      )}

      {manage ? <MessageForm userId={user.id} /> : null}
    </section>
  );
}
