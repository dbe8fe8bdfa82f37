/**
 * The dashboard: desktops by state and open sessions over every pool (all pages of the list),
 * failed jobs, sessions over the last day, and the pools that are not healthy.
 */
import { useQuery } from "@tanstack/react-query";
import { useMemo, useState } from "react";
import { Link } from "react-router";
import { unwrap } from "../api/client";
import { allPages } from "../api/lists";
import { can } from "../auth/permissions";
import { Badge } from "../components/Badge";
import { SessionsChart } from "../components/SessionsChart";
import { ProblemAlert } from "../components/Problem";
import { words } from "../format";
import { presetPeriod } from "../reports/period";
import { fromSessions, fromUsage } from "../reports/sessions";
import { fetchUsage } from "../reports/usage";
import { useSession } from "../session";

export function DashboardPage() {
  const { api, me } = useSession();
  const pools = useQuery({
    queryKey: ["dashboard", "pools"],
    enabled: can(me, "pools:read"),
    queryFn: async () => ({
      items: await allPages((cursor, limit) => unwrap(api.GET("/api/v1/pools", { params: { query: { limit, cursor } } }))),
    }),
  });
  // The last day's hours: the usage report's recorded facts when the user may read reports.
  const reports = can(me, "reports:read");
  const [day] = useState(() => presetPeriod("24h", "hour", Date.now()));
  const usage = useQuery({
    queryKey: ["dashboard", "usage", day],
    enabled: reports,
    queryFn: () => fetchUsage(api, { ...day, bucket: "hour" }),
  });
  const sessions = useQuery({
    queryKey: ["dashboard", "sessions"],
    enabled: !reports && can(me, "sessions:read"),
    // The latest 500 sessions (newest first): the chart keeps those of the last day.
    queryFn: () => unwrap(api.GET("/api/v1/sessions", { params: { query: { limit: 500 } } })),
  });
  const failedJobs = useQuery({
    queryKey: ["dashboard", "jobs"],
    enabled: can(me, "jobs:read"),
    queryFn: () => unwrap(api.GET("/api/v1/jobs", { params: { query: { limit: 100, state: "dead" } } })),
  });
  const byState: Record<string, number> = {};
  let inSession = 0;
  for (const pool of pools.data?.items ?? []) {
    for (const [state, count] of Object.entries(pool.counts.by_state)) byState[state] = (byState[state] ?? 0) + count;
    inSession += pool.counts.in_session;
  }
  const hourly = useMemo(
    () => (usage.data ? fromUsage(usage.data) : sessions.data ? fromSessions(sessions.data.items, Date.now()) : null),
    [usage.data, sessions.data],
  );
  const total = Object.values(byState).reduce((a, b) => a + b, 0);
  const unhealthy = (pools.data?.items ?? []).filter((pool) => pool.health?.status !== "healthy");
  const healthy = (pools.data?.items.length ?? 0) - unhealthy.length;
  return (
    <section>
      <h1>Dashboard</h1>
      <ProblemAlert error={pools.error ?? failedJobs.error ?? sessions.error ?? usage.error} />
      <div className="cards">
        <article>
          <h2>Desktops by state</h2>
          <dl className="counts">
            {Object.entries(byState)
              .filter(([, count]) => count > 0)
              .map(([state, count]) => (
                <div key={state}>
                  <dt>{words(state)}</dt>
                  <dd>{count}</dd>
                </div>
              ))}
          </dl>
          <div className="bar" role="img" aria-label={`${total} desktops`}>
            {Object.entries(byState)
              .filter(([, count]) => count > 0)
              .map(([state, count]) => (
                <span key={state} className={`bar-${state}`} style={{ flexGrow: count }} title={`${words(state)}: ${count}`} />
              ))}
          </div>
        </article>
        <article>
          <h2>Open sessions</h2>
          <p className="big">{inSession}</p>
        </article>
        <article>
          <h2>Failed jobs</h2>
          <p className="big">
            <Link to="/jobs">{failedJobs.data?.items.length ?? 0}</Link>
          </p>
        </article>
      </div>
      {hourly ? <SessionsChart hourly={hourly} /> : null}
      <h2>Pool health</h2>
      {pools.data ? (
        <p>
          {healthy} of {pools.data.items.length} pools healthy{unhealthy.length ? "; the others:" : "."}
        </p>
      ) : null}
      <ul className="pool-health">
        {unhealthy.map((pool) => (
          <li key={pool.id}>
            <Link to={`/pools/${pool.id}`}>{pool.name}</Link> <Badge value={pool.health?.status ?? "unknown"} />{" "}
            {pool.health?.reasons.join(" ")}
          </li>
        ))}
      </ul>
    </section>
  );
}
