/**
 * The notice a user sees in his desktop view while an administrator watches his session
 * (read-only): who, since when. Read from `GET /api/v1/me/watchers`; the live `session.watched`
 * event (his, as the watched session's user) reads it again when a view begins or ends.
 */
import { useQuery } from "@tanstack/react-query";
import { unwrap } from "../api/client";
import { useSession } from "../session";

export function WatchNotice() {
  const { api } = useSession();
  // Under "my-sessions": every session event (his own view's and a watcher's) reads it again.
  const watchers = useQuery({
    queryKey: ["my-sessions", "watchers"],
    queryFn: () => unwrap(api.GET("/api/v1/me/watchers")),
  });
  const items = watchers.data?.items ?? [];
  if (!items.length) return null;
  const names = [...new Set(items.map((w) => w.watcher_name))].join(", ");
  const since = new Date(items[0]!.since).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
  return (
    <div className="user-message user-message-warning" role="status" data-testid="watch-notice">
      <strong>
        {names} {items.length === 1 ? "is" : "are"} watching your desktop
      </strong>{" "}
      (since {since}): they see your screen and cannot type or click. This notice goes away when they stop.
    </div>
  );
}
