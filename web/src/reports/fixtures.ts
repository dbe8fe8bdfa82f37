/** Reports as the API answers them, for the unit tests of the chart series. */
import type { Schemas } from "../api/client";

type Figures = Schemas["UsageFigures"];

export function figures(start: string, end: string, values: Partial<Figures> = {}): Figures {
  return {
    start,
    end,
    peak_concurrent: 0,
    mean_concurrent: 0,
    sessions_started: 0,
    distinct_users: 0,
    connected_hours: 0,
    logons: 0,
    failed_connections: 0,
    failed_by_reason: {},
    logon_seconds_p50: null,
    logon_seconds_p95: null,
    ...values,
  };
}

/** The usage report of the API test: 08:00 to 11:00 on 2026-01-10, by the hour. */
export const USAGE: Schemas["UsageReport"] = {
  from: "2026-01-10T08:00:00+00:00",
  to: "2026-01-10T11:00:00+00:00",
  bucket: "hour",
  pool_id: null,
  generated_at: "2026-01-12T00:00:00+00:00",
  totals: figures("2026-01-10T08:00:00+00:00", "2026-01-10T11:00:00+00:00", {
    peak_concurrent: 3,
    mean_concurrent: 0.7778,
    sessions_started: 2,
    distinct_users: 2,
    connected_hours: 2.3333,
    logons: 5,
    failed_connections: 3,
    failed_by_reason: { daemon_error: 2, desktop_unreachable: 1 },
    logon_seconds_p50: 2,
    logon_seconds_p95: 10,
  }),
  buckets: [
    figures("2026-01-10T08:00:00+00:00", "2026-01-10T09:00:00+00:00", {
      peak_concurrent: 3,
      mean_concurrent: 1.5833,
      sessions_started: 2,
      distinct_users: 2,
      connected_hours: 1.5833,
      logons: 2,
      logon_seconds_p50: 2,
      logon_seconds_p95: 10,
    }),
    figures("2026-01-10T09:00:00+00:00", "2026-01-10T10:00:00+00:00", {
      peak_concurrent: 1,
      mean_concurrent: 0.75,
      distinct_users: 1,
      connected_hours: 0.75,
      logons: 3,
      failed_connections: 3,
      failed_by_reason: { daemon_error: 2, desktop_unreachable: 1 },
    }),
    figures("2026-01-10T10:00:00+00:00", "2026-01-10T11:00:00+00:00"),
  ],
};
