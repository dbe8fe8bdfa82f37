/** A link to a session's recording, for holders of `recordings:read` (nothing otherwise). */
import { useQuery } from "@tanstack/react-query";
import { Link } from "react-router";
import { unwrap } from "../api/client";
import { can } from "../auth/permissions";
import { useSession } from "../session";

export function SessionRecordingLink({ sessionId }: { sessionId: string }) {
  const { api, me } = useSession();
  const allowed = can(me, "recordings:read");
  const found = useQuery({
    queryKey: ["recordings", { session_id: sessionId }],
    enabled: allowed,
    queryFn: () =>
      unwrap(api.GET("/api/v1/recordings", { params: { query: { session_id: sessionId, limit: 1 } } })),
  });
  const recording = found.data?.items[0];
  if (!allowed || !recording) return null;
  return (
    <p>
      <Link to={`/recordings/${recording.id}`}>Play the session&apos;s recording</Link>
      {recording.ended_at ? "" : " (still recording)"}
    </p>
  );
}
