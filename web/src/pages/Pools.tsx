/** Pools: the list with desktop counts by state and health (with its reasons), and a new pool. */
import { Link } from "react-router";
import { type Schemas } from "../api/client";
import { countText, useCursorList } from "../api/lists";
import { POOL_LIST, poolPages } from "../api/queries";
import { can } from "../auth/permissions";
import { Badge } from "../components/Badge";
import { DataTable, type Column } from "../components/DataTable";
import { ProblemAlert } from "../components/Problem";
import { useSession } from "../session";

type Pool = Schemas["Pool"];

const COLUMNS: Column<Pool>[] = [
  { header: "Name", cell: (pool) => <Link to={`/pools/${pool.id}`}>{pool.name}</Link> },
  { header: "State", cell: (pool) => <Badge value={pool.state} /> },
  {
    header: "Health",
    cell: (pool) => (
      <>
        <Badge value={pool.health?.status ?? "unknown"} />
        {pool.health?.reasons.length ? (
          <ul className="reasons" data-testid="pool-health-reasons">
            {pool.health.reasons.map((reason) => (
              <li key={reason}>{reason}</li>
            ))}
          </ul>
        ) : null}
        {pool.reconcile_error ? (
          <span className="reconcile-failing" title={pool.reconcile_error.reason}>
            {" "}
            reconciliation failing
          </span>
        ) : null}
      </>
    ),
  },
  { header: "Kind", cell: (pool) => (pool.kind === "persistent" ? "persistent" : "non-persistent") },
  { header: "Size", cell: (pool) => `${pool.min_size}–${pool.max_size} (+${pool.spare} spare)` },
  { header: "Desktops", className: "num", cell: (pool) => pool.counts.total },
  { header: "Ready", className: "num", cell: (pool) => pool.counts.by_state.ready },
  { header: "In use", className: "num", cell: (pool) => pool.counts.by_state.in_use },
  {
    header: "Building",
    className: "num",
    cell: (pool) =>
      pool.counts.by_state.provisioning +
      pool.counts.by_state.starting +
      pool.counts.by_state.waiting_for_agent +
      pool.counts.by_state.waiting_for_windows +
      pool.counts.by_state.refreshing,
  },
  { header: "Failed", className: "num", cell: (pool) => pool.counts.by_state.failed },
];

export function PoolsPage() {
  const { api, me } = useSession();
  const list = useCursorList(POOL_LIST, poolPages(api));
  return (
    <section>
      <div className="page-head">
        <h1>Pools</h1>
        {can(me, "pools:manage") ? (
          <Link role="button" to="/pools/new">
            New pool
          </Link>
        ) : null}
      </div>
      <ProblemAlert error={list.error} />
      <DataTable
        caption="Pools"
        columns={COLUMNS}
        {...list.table}
        rowKey={(pool) => pool.id}
        empty="No pool yet."
      />
      <p className="count">{countText(list.rows.length, list.complete, "pools")}</p>
    </section>
  );
}
