/**
 * The dashboard's sessions over the last day, as one series of 24 hourly counts: from the
 * usage report (recorded facts: the peak of concurrent sessions in each hour) when the user may
 * read reports, else counted from the latest sessions the user may list.
 */
import type { Schemas } from "../api/client";
import type { ChartOption } from "../components/Chart";
import { COLORS } from "./palette";
import { bucketLabel } from "./period";
import { axisTooltipOption, plain } from "./tooltip";

type Session = Schemas["Session"];
const HOUR = 3_600_000;

export interface HourlySessions {
  /** The hours' labels (UTC), oldest first. */
  labels: string[];
  counts: number[];
  /** What the counts are. */
  measure: string;
}

/** Sessions open during each of the last 24 hours, oldest hour first. */
export function openPerHour(sessions: Session[], now: number): number[] {
  const start = now - 24 * HOUR;
  const counts = new Array<number>(24).fill(0);
  for (const session of sessions) {
    const from = Date.parse(session.started_at);
    const to = session.ended_at ? Date.parse(session.ended_at) : now;
    for (let hour = 0; hour < 24; hour += 1) {
      const begins = start + hour * HOUR;
      if (from < begins + HOUR && to >= begins) counts[hour]! += 1;
    }
  }
  return counts;
}

/** The last day counted from a list of sessions (no report permission). */
export function fromSessions(sessions: Session[], now: number): HourlySessions {
  const start = now - 24 * HOUR;
  return {
    labels: Array.from({ length: 24 }, (_, hour) => bucketLabel(new Date(start + hour * HOUR).toISOString(), "hour")),
    counts: openPerHour(sessions, now),
    measure: "sessions open",
  };
}

/** The last day from the usage report's hour buckets: the peak of concurrent sessions. */
export function fromUsage(report: Schemas["UsageReport"]): HourlySessions {
  return {
    labels: report.buckets.map((bucket) => bucketLabel(bucket.start, "hour")),
    counts: report.buckets.map((bucket) => bucket.peak_concurrent),
    measure: "peak concurrent sessions",
  };
}

export function hourlyOption(hourly: HourlySessions): ChartOption {
  return {
    animation: false,
    tooltip: axisTooltipOption(plain),
    grid: { left: 40, right: 16, top: 16, bottom: 40 },
    xAxis: { type: "category", data: hourly.labels.map((label) => label.slice(11)), axisLabel: { hideOverlap: true } },
    yAxis: { type: "value", minInterval: 1 },
    series: [{ type: "bar", name: hourly.measure, data: hourly.counts, itemStyle: { color: COLORS.primary } }],
  };
}
