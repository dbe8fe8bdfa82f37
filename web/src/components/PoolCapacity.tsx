/**
 * A pool's capacity over the past and the coming week (`GET /api/v1/pools/{pool_id}/capacity`):
 * the targets its schedule plans as steps with the phases named, what the reconciler recorded
 * (ready, in use, powered off, other) as stacked areas, and a line at now. Times are the
 * schedule's zone's (the browser's for a pool without a schedule, or when the caller may not
 * read schedules).
 */
import { useQuery } from "@tanstack/react-query";
import { useMemo } from "react";
import { Link } from "react-router";
import { unwrap, type Schemas } from "../api/client";
import { can } from "../auth/permissions";
import { capacityOption, capacitySummary, inForceText } from "../schedules/chart";
import { browserZone } from "../schedules/draft";
import { useSession } from "../session";
import { Chart } from "./Chart";
import { ProblemAlert } from "./Problem";

const WEEK = 7 * 24 * 3_600_000;
/** The reconciler records a sample every 5 minutes: the plot is read again each minute. */
const REFRESH_MS = 60_000;

export function PoolCapacity({ pool }: { pool: Schemas["Pool"] }) {
  const { api, me } = useSession();
  const scheduleId = pool.schedule_id;
  const schedule = useQuery({
    queryKey: ["schedules", scheduleId],
    enabled: Boolean(scheduleId) && can(me, "schedules:read"),
    queryFn: () => unwrap(api.GET("/api/v1/schedules/{schedule_id}", { params: { path: { schedule_id: scheduleId ?? "" } } })),
  });
  const capacity = useQuery({
    queryKey: ["capacity", pool.id, scheduleId],
    refetchInterval: REFRESH_MS,
    queryFn: async () => {
      const now = Date.now();
      const start = now - WEEK;
      const end = now + WEEK;
      const data = await unwrap(
        api.GET("/api/v1/pools/{pool_id}/capacity", {
          params: {
            path: { pool_id: pool.id },
            query: { from: new Date(start).toISOString(), to: new Date(end).toISOString() },
          },
        }),
      );
      return { data, start, end, now };
    },
  });
  const zone = schedule.data?.time_zone ?? browserZone();
  const option = useMemo(
    () => (capacity.data ? capacityOption(capacity.data.data, capacity.data.start, capacity.data.end, capacity.data.now, zone) : null),
    [capacity.data, zone],
  );
  return (
    <section aria-labelledby="capacity-title">
      <h2 id="capacity-title">Capacity</h2>
      <p className="meta" data-testid="pool-schedule">
        {scheduleId ? (
          <>
            Schedule{" "}
            {schedule.data ? <Link to={`/schedules/${scheduleId}`}>{schedule.data.name}</Link> : <code>{scheduleId}</code>}
            {schedule.data ? ` · in force now: ${inForceText(schedule.data)}` : ""}
          </>
        ) : (
          <>No schedule: {pool.min_size} desktops at least and {pool.spare} spare around the clock.</>
        )}{" "}
        · the past and the coming week, {zone}
      </p>
      <ProblemAlert error={capacity.error} />
      {option && capacity.data ? (
        <Chart
          option={option}
          label={capacitySummary(capacity.data.data, zone)}
          height="20rem"
          testId="pool-capacity"
          caption="Planned steps over recorded counts; Ctrl and the mouse wheel zoom in, dragging moves along."
        />
      ) : capacity.isLoading ? (
        <p aria-busy="true">Loading the capacity…</p>
      ) : null}
    </section>
  );
}
