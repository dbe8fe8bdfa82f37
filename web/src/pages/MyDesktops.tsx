/** My desktops: the pools the user is entitled to, the desktops they hold, and opening one. */
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useLocation, useNavigate } from "react-router";
import { unwrap, type Schemas } from "../api/client";
import { Badge } from "../components/Badge";
import { ProblemAlert } from "../components/Problem";
import { words } from "../format";
import { useSession } from "../session";

type MyPool = Schemas["MyPool"];

const AVAILABILITY: Record<MyPool["availability"], string> = {
  available: "A desktop is ready for you.",
  startable: "No desktop is running: opening this pool starts one for you.",
  no_desktop_available: "No desktop is free right now; try again shortly.",
  desktop_not_ready: "Your desktop is being prepared.",
  disabled: "This pool is disabled.",
  draining: "This pool is being retired.",
};

export function MyDesktopsPage() {
  const { api } = useSession();
  const client = useQueryClient();
  const navigate = useNavigate();
  // What the desktop view said on the way back (a log-off).
  const notice = (useLocation().state as { notice?: string } | null)?.notice;
  const pools = useQuery({
    queryKey: ["my-pools"],
    queryFn: () => unwrap(api.GET("/api/v1/me/pools", { params: { query: { limit: 500 } } })),
  });
  const open = useMutation({
    mutationFn: (pool: MyPool) =>
      unwrap(api.POST("/api/v1/me/pools/{pool_id}/desktop", { params: { path: { pool_id: pool.id } } })),
    onSuccess: (allocated) => {
      void client.invalidateQueries({ queryKey: ["my-pools"] });
      // 200: the desktop and its connection; 202: a desktop being started for the user.
      const state = "connection" in allocated ? { connection: allocated.connection } : { starting: allocated };
      navigate(`/desktop/${allocated.id}`, { state });
    },
  });
  return (
    <section>
      <h1>My desktops</h1>
      {notice ? (
        <p role="status" className="notice">
          {notice}
        </p>
      ) : null}
      <ProblemAlert error={pools.error ?? open.error} />
      {pools.isLoading ? <p aria-busy="true">Loading…</p> : null}
      {pools.data && !pools.data.items.length ? (
        <p>You are not entitled to any desktop pool yet. Ask your administrator.</p>
      ) : null}
      <div className="cards">
        {pools.data?.items.map((pool) => (
          <article key={pool.id} aria-labelledby={`pool-${pool.id}`}>
            <header>
              <h2 id={`pool-${pool.id}`}>{pool.name}</h2>
              <small>
                {words(pool.kind)} · {pool.os_type}
              </small>
            </header>
            {pool.description ? <p>{pool.description}</p> : null}
            {pool.desktop ? (
              <p>
                Your desktop <strong>{pool.desktop.name}</strong> <Badge value={pool.desktop.state} />
              </p>
            ) : null}
            <p>{AVAILABILITY[pool.availability]}</p>
            {pool.desktop && ["in_use", "ready", "powered_off"].includes(pool.desktop.state) ? (
              <button type="button" className="secondary" onClick={() => navigate(`/desktop/${pool.desktop!.id}`)}>
                Connect to {pool.desktop.name}
              </button>
            ) : null}
            <button
              type="button"
              disabled={pool.availability !== "available" && pool.availability !== "startable"}
              aria-busy={open.isPending && open.variables?.id === pool.id}
              onClick={() => open.mutate(pool)}
            >
              Open {pool.name}
            </button>
          </article>
        ))}
      </div>
    </section>
  );
}
