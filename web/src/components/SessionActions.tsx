/**
 * Disconnect and log off of users' sessions (the Sessions page, a session's page): each asks
 * first, naming the people it disrupts, with an optional message to them that their desktop
 * views show before it is done (the action's own `message`, sent by the API first).
 */
import { useMutation, useQueryClient } from "@tanstack/react-query";
import { unwrap, type Schemas } from "../api/client";
import { useSession } from "../session";
import { useConfirm } from "./Confirm";

type Session = Schemas["Session"];

/** "Desk User on np-01" for a confirmation. */
export function sessionWho(s: Session): string {
  return `${userOf(s)} on ${s.desktop_name}`;
}

function userOf(s: Session): string {
  return s.user_name || s.user_email || "an unknown user";
}

/** Whether an administrator may still ask the session to close. */
export function disconnectable(s: Session): boolean {
  return s.state === "open" && !s.disconnect_requested_at;
}

export function useSessionActions() {
  const { api } = useSession();
  const client = useQueryClient();
  const [dialog, ask] = useConfirm();
  const settled = () => {
    void client.invalidateQueries({ queryKey: ["sessions"] });
    void client.invalidateQueries({ queryKey: ["session"] });
  };
  const disconnect = useMutation({
    mutationFn: ({ sessions, message }: { sessions: Session[]; message: string }) =>
      Promise.all(
        sessions.map((session) =>
          unwrap(
            api.POST("/api/v1/sessions/{session_id}/disconnect", {
              params: { path: { session_id: session.id } },
              body: { message: message || null },
            }),
          ),
        ),
      ),
    onSettled: settled,
  });
  const logOff = useMutation({
    mutationFn: ({ session, message }: { session: Session; message: string }) =>
      unwrap(
        api.POST("/api/v1/helpdesk/users/{user_id}/desktops/{desktop_id}/logoff", {
          params: { path: { user_id: session.user_id, desktop_id: session.desktop_id } },
          body: { message: message || null },
        }),
      ),
    onSettled: settled,
  });
  /** Ask, then disconnect `sessions`; resolves true when it was confirmed. */
  const askDisconnect = async (sessions: Session[]): Promise<boolean> => {
    if (!sessions.length) return false;
    const one = sessions.length === 1 ? sessions[0]! : null;
    const names = [...new Set(sessions.map(userOf))];
    const answer = await ask({
      title: one ? `Disconnect ${userOf(one)}?` : `Disconnect ${sessions.length} sessions?`,
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
      confirm: one ? `Disconnect ${one.desktop_name}` : `Disconnect ${sessions.length} sessions`,
      messageTo: names.length === 1 ? names[0] : `the ${names.length} users`,
    });
    if (answer) disconnect.mutate({ sessions, message: answer.message });
    return Boolean(answer);
  };
  const askLogOff = async (session: Session): Promise<boolean> => {
    const answer = await ask({
      title: `Log ${userOf(session)} off ${session.desktop_name}?`,
      body: (
        <p>
          {sessionWho(session)} is logged off: his programs are closed and any unsaved work in them is lost; the pool's
          rule after a log-off applies to the desktop.
        </p>
      ),
      confirm: `Log off ${session.desktop_name}`,
      messageTo: userOf(session),
    });
    if (answer) logOff.mutate({ session, message: answer.message });
    return Boolean(answer);
  };
  return { dialog, askDisconnect, askLogOff, error: disconnect.error ?? logOff.error };
}
