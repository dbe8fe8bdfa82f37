/**
 * Messages from administrators in the desktop view: each still valid and not dismissed, with
 * its severity, its sender and a Dismiss button. Read from `GET /api/v1/me/messages`, which the
 * live `message.sent` event refreshes the moment one is sent.
 */
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { unwrap } from "../api/client";
import { useSession } from "../session";

const TITLE: Record<string, string> = {
  info: "Message from your administrator",
  warning: "Warning from your administrator",
  urgent: "Urgent message from your administrator",
};

export function UserMessages() {
  const { api } = useSession();
  const client = useQueryClient();
  const messages = useQuery({
    queryKey: ["my-messages"],
    queryFn: () => unwrap(api.GET("/api/v1/me/messages")),
  });
  const dismiss = useMutation({
    mutationFn: (id: string) =>
      unwrap(api.POST("/api/v1/me/messages/{message_id}/dismiss", { params: { path: { message_id: id } } })),
    onSettled: () => void client.invalidateQueries({ queryKey: ["my-messages"] }),
  });
  const items = messages.data?.items ?? [];
  if (!items.length) return null;
  return (
    <div className="user-messages">
      {items.map((message) => (
        <div
          key={message.id}
          className={`user-message user-message-${message.severity}`}
          role={message.severity === "info" ? "status" : "alert"}
          data-testid="user-message"
        >
          <strong>{TITLE[message.severity] ?? TITLE.info}</strong>
          {message.sender_name ? <small> ({message.sender_name})</small> : null}
          <p>{message.body}</p>
          <button type="button" className="secondary outline small" onClick={() => dismiss.mutate(message.id)}>
            Dismiss
          </button>
        </div>
      ))}
    </div>
  );
}
