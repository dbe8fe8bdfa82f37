/** A pool's running rollout on its page: where it is and what it waits for (issue 37). */
import { useQuery } from "@tanstack/react-query";
import { Link } from "react-router";
import { unwrap } from "../api/client";
import { ACTIVE } from "../pages/Rollouts";
import { useSession } from "../session";
import { Badge } from "./Badge";

export function PoolRollout({ poolId }: { poolId: string }) {
  const { api } = useSession();
  // The rollout page's query: live events keep both fresh.
  const rollouts = useQuery({
    queryKey: ["rollouts", poolId],
    queryFn: () =>
      unwrap(api.GET("/api/v1/pools/{pool_id}/rollouts", { params: { path: { pool_id: poolId }, query: { limit: 20 } } })),
  });
  const active = rollouts.data?.items.find((item) => ACTIVE.has(item.state));
  if (!active) return null;
  return (
    <p className="notice" role="status" data-testid="pool-rollout">
      <strong>
        Rollout {active.from_template} → {active.to_template}
      </strong>{" "}
      <Badge value={active.state} /> {active.counts.percent} % · {active.counts.on_new_template} of {active.counts.total} on{" "}
      {active.to_template}
      {active.waiting_for ? ` · waiting for ${active.waiting_for}` : ""} ·{" "}
      <Link to={`/pools/${poolId}/rollouts`}>Follow the rollout</Link>
    </p>
  );
}
