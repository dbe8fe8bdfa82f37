/**
 * Capacity schedules: the list with the phase in force now, a new schedule, and one schedule in
 * the editor (read-only without `schedules:manage`) with its delete.
 */
import { useState } from "react";
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { Link, useNavigate, useParams } from "react-router";
import { unwrap, type Schemas } from "../api/client";
import { allPages } from "../api/lists";
import { can } from "../auth/permissions";
import { useConfirm } from "../components/Confirm";
import { DataTable, type Column } from "../components/DataTable";
import { ProblemAlert } from "../components/Problem";
import { ScheduleEditor } from "../components/ScheduleEditor";
import { inForceText } from "../schedules/chart";
import { when } from "../format";
import { useSession } from "../session";

type Schedule = Schemas["Schedule"];

/** The names of the pools that use each schedule, by schedule id, in the pools' order. */
export function poolsBySchedule(pools: Pick<Schemas["Pool"], "name" | "schedule_id">[]): Map<string, string[]> {
  const out = new Map<string, string[]>();
  for (const pool of pools) {
    if (!pool.schedule_id) continue;
    out.set(pool.schedule_id, [...(out.get(pool.schedule_id) ?? []), pool.name]);
  }
  return out;
}

function columns(users: Map<string, string[]> | null): Column<Schedule>[] {
  return [
    { header: "Name", cell: (schedule) => <Link to={`/schedules/${schedule.id}`}>{schedule.name}</Link> },
    { header: "Time zone", cell: (schedule) => schedule.time_zone },
    { header: "Phases", cell: (schedule) => schedule.phases.map((phase) => phase.name).join(", ") },
    { header: "Exceptions", className: "num", cell: (schedule) => schedule.exceptions.length },
    { header: "In force now", cell: (schedule) => inForceText(schedule) },
    // Only for those who may read pools.
    ...(users ? [{ header: "Used by", cell: (schedule: Schedule) => (users.get(schedule.id) ?? []).join(", ") || "no pool" }] : []),
  ];
}

export function SchedulesPage() {
  const { api, me } = useSession();
  const schedules = useQuery({
    queryKey: ["schedules", "list"],
    queryFn: async () => ({
      items: await allPages((cursor, limit) => unwrap(api.GET("/api/v1/schedules", { params: { query: { limit, cursor } } }))),
    }),
  });
  const pools = useQuery({
    queryKey: ["pools", "all"],
    enabled: can(me, "pools:read"),
    queryFn: () => allPages((cursor, limit) => unwrap(api.GET("/api/v1/pools", { params: { query: { limit, cursor } } }))),
  });
  return (
    <section>
      <div className="page-head">
        <h1>Schedules</h1>
        {can(me, "schedules:manage") ? (
          <Link role="button" to="/schedules/new">
            New schedule
          </Link>
        ) : null}
      </div>
      <p className="meta">
        A pool that uses a schedule keeps the desktops its phase in force asks for: more ready in working hours, idle
        ones powered off at night, other rules on exception dates. Pools choose theirs in their settings.
      </p>
      <ProblemAlert error={schedules.error} />
      <DataTable
        caption="Schedules"
        columns={columns(pools.data ? poolsBySchedule(pools.data) : null)}
        rows={schedules.data?.items ?? []}
        rowKey={(schedule) => schedule.id}
        loading={schedules.isLoading}
        empty="No schedule yet."
      />
    </section>
  );
}

export function NewSchedulePage() {
  const navigate = useNavigate();
  return (
    <section>
      <h1>New schedule</h1>
      <ScheduleEditor onSaved={(saved) => navigate(`/schedules/${saved.id}`)} />
    </section>
  );
}

export function ScheduleDetailPage() {
  const { scheduleId = "" } = useParams();
  const { api, me } = useSession();
  const client = useQueryClient();
  const navigate = useNavigate();
  const schedule = useQuery({
    queryKey: ["schedules", scheduleId],
    queryFn: () => unwrap(api.GET("/api/v1/schedules/{schedule_id}", { params: { path: { schedule_id: scheduleId } } })),
  });
  // The pools using it: the API refuses to delete it while any does, so the dialog says so first.
  const pools = useQuery({
    queryKey: ["pools", "all"],
    enabled: can(me, "pools:read"),
    queryFn: () => allPages((cursor, limit) => unwrap(api.GET("/api/v1/pools", { params: { query: { limit, cursor } } }))),
  });
  const [dialog, ask] = useConfirm();
  const [checking, setChecking] = useState(false);
  const remove = useMutation({
    mutationFn: () => unwrap(api.DELETE("/api/v1/schedules/{schedule_id}", { params: { path: { schedule_id: scheduleId } } })),
    onSuccess: () => {
      void client.invalidateQueries({ queryKey: ["schedules"] });
      navigate("/schedules");
    },
  });
  if (schedule.error) return <ProblemAlert error={schedule.error} />;
  if (!schedule.data) return <p aria-busy="true">Loading…</p>;
  const data = schedule.data;
  const manage = can(me, "schedules:manage");
  const askDelete = async () => {
    // The pools using it as they are now, read before the dialog opens: a list still loading
    // (a slow API) or read before another tab attached it would offer a Delete the API refuses.
    setChecking(true);
    const current = can(me, "pools:read") ? ((await pools.refetch()).data ?? []) : [];
    setChecking(false);
    const using = current.filter((pool) => pool.schedule_id === data.id);
    const answer = await ask({
      title: `Delete the schedule ${data.name}?`,
      body: <p>The schedule and its phases are deleted. Its history stays in the audit log.</p>,
      confirm: `Delete ${data.name}`,
      refusal: using.length ? (
        <>
          Pools use it: {using.map((pool) => pool.name).join(", ")}. Detach it from {using.length === 1 ? "that pool" : "those pools"}{" "}
          (its Edit settings, Capacity schedule: None) first; then delete it.
        </>
      ) : undefined,
    });
    if (answer) remove.mutate();
  };
  return (
    <section>
      <div className="page-head">
        <h1>Schedule {data.name}</h1>
        {manage ? (
          <button
            type="button"
            className="contrast outline"
            onClick={() => void askDelete()}
            disabled={checking}
            aria-busy={checking}
          >
            Delete
          </button>
        ) : null}
      </div>
      <p className="meta" data-testid="schedule-in-force">
        In force now: {inForceText(data)} · {data.time_zone} · changed {when(data.updated_at)}
        {manage ? "" : " · read-only: changing it needs schedules:manage"}
      </p>
      <ProblemAlert error={remove.error} />
      {dialog}
      {/* A new generation (saved here or elsewhere) starts the form again from what is stored. */}
      <ScheduleEditor key={`${data.id}:${data.generation}`} schedule={data} readOnly={!manage} />
    </section>
  );
}
