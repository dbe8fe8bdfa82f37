/**
 * The usage report (`GET /api/v1/reports/usage`) as chart options: one chart per figure, the
 * buckets along the x axis (UTC), nothing computed that the report does not hold.
 */
import { unwrap, type Api, type Schemas } from "../api/client";
import type { paths } from "../api/schema";
import type { ChartOption } from "../components/Chart";
import { COLORS, SEQUENCE } from "./palette";
import { bucketLabel, type Bucket } from "./period";
import { axisTooltipOption, plain } from "./tooltip";

type Report = Schemas["UsageReport"];
type Figures = Schemas["UsageFigures"];

export interface UsageChart {
  key: string;
  title: string;
  option: ChartOption;
  /** What the chart says, for screen readers and tests. */
  label: string;
}

interface Line {
  name: string;
  values: (number | null)[];
  color: string;
  kind: "bar" | "line";
  stack?: string;
}

/** A chart of `lines` over the report's buckets. */
export function bucketChart(labels: string[], lines: Line[], unit: string): ChartOption {
  return {
    animation: false,
    color: lines.map((line) => line.color),
    tooltip: axisTooltipOption(unit === "seconds" ? seconds : plain),
    legend: { show: lines.length > 1, top: 0 },
    grid: { left: 48, right: 16, top: lines.length > 1 ? 32 : 16, bottom: 48 },
    xAxis: { type: "category", data: labels, axisLabel: { hideOverlap: true } },
    yAxis: { type: "value", name: unit, minInterval: unit === "hours" || unit === "seconds" ? 0 : 1 },
    series: lines.map((line) =>
      line.kind === "bar"
        ? { type: "bar", name: line.name, data: line.values, stack: line.stack, itemStyle: { color: line.color } }
        : { type: "line", name: line.name, data: line.values, connectNulls: false, showSymbol: labels.length < 50, lineStyle: { color: line.color }, itemStyle: { color: line.color } },
    ),
  };
}

/** The failure reasons of the report, in name order. */
export function failureReasons(buckets: Figures[]): string[] {
  return [...new Set(buckets.flatMap((bucket) => Object.keys(bucket.failed_by_reason)))].sort();
}

function sum(values: (number | null)[]): number {
  return values.reduce<number>((total, value) => total + (value ?? 0), 0);
}

export type UsageQuery = NonNullable<paths["/api/v1/reports/usage"]["get"]["parameters"]["query"]>;

/** The usage report as JSON (the operation also answers CSV, to `Accept: text/csv`). */
export async function fetchUsage(api: Api, query: UsageQuery): Promise<Report> {
  const data = await unwrap(api.GET("/api/v1/reports/usage", { params: { query } }));
  if (typeof data === "string") throw new Error("The API answered CSV to a request for JSON.");
  return data;
}

/** The report's charts: concurrency, sessions and users, connected hours, failures, logon times. */
export function usageCharts(report: Report): UsageChart[] {
  const bucket = report.bucket as Bucket;
  const buckets = report.buckets;
  const labels = buckets.map((item) => bucketLabel(item.start, bucket));
  const pick = (figure: (item: Figures) => number | null) => buckets.map(figure);
  const per = bucket === "hour" ? "per hour" : "per day";
  const totals = report.totals;
  const reasons = failureReasons(buckets);
  return [
    {
      key: "concurrency",
      title: "Concurrent sessions",
      label: `Concurrent sessions ${per}: peak ${totals.peak_concurrent}, mean ${totals.mean_concurrent} over the period.`,
      option: bucketChart(
        labels,
        [
          { name: "Peak", values: pick((item) => item.peak_concurrent), color: COLORS.primary, kind: "bar" },
          { name: "Mean", values: pick((item) => item.mean_concurrent), color: COLORS.secondary, kind: "line" },
        ],
        "sessions",
      ),
    },
    {
      key: "sessions",
      title: "Sessions started and distinct users",
      label: `Sessions started ${per} (${totals.sessions_started} in all) and distinct users (${totals.distinct_users} in all).`,
      option: bucketChart(
        labels,
        [
          { name: "Sessions started", values: pick((item) => item.sessions_started), color: COLORS.primary, kind: "bar" },
          { name: "Distinct users", values: pick((item) => item.distinct_users), color: COLORS.tertiary, kind: "bar" },
        ],
        "sessions",
      ),
    },
    {
      key: "hours",
      title: "Connected hours",
      label: `Connected hours ${per}: ${totals.connected_hours} in all.`,
      option: bucketChart(
        labels,
        [{ name: "Connected hours", values: pick((item) => item.connected_hours), color: COLORS.tertiary, kind: "bar" }],
        "hours",
      ),
    },
    {
      key: "failures",
      title: "Failed connections by reason",
      label: reasons.length
        ? `Failed connections ${per} by reason: ${reasons
            .map((reason) => `${reason} ${sum(pick((item) => item.failed_by_reason[reason] ?? 0))}`)
            .join(", ")}.`
        : `No failed connection in the period.`,
      option: bucketChart(
        labels,
        reasons.length
          ? reasons.map((reason, index) => ({
              name: reason,
              values: pick((item) => item.failed_by_reason[reason] ?? 0),
              color: SEQUENCE[index % SEQUENCE.length]!,
              kind: "bar" as const,
              stack: "failures",
            }))
          : [{ name: "Failed connections", values: pick((item) => item.failed_connections), color: COLORS.failure, kind: "bar" }],
        "logons",
      ),
    },
    {
      key: "logon",
      title: "Logon duration (request to first frame)",
      label: `Logon duration ${per}: median ${seconds(totals.logon_seconds_p50)}, 95th percentile ${seconds(totals.logon_seconds_p95)} over the period.`,
      option: bucketChart(
        labels,
        [
          { name: "Median", values: pick((item) => item.logon_seconds_p50), color: COLORS.primary, kind: "line" },
          { name: "95th percentile", values: pick((item) => item.logon_seconds_p95), color: COLORS.failure, kind: "line" },
        ],
        "seconds",
      ),
    },
  ];
}

/** Seconds as read on screen (`—` for none). */
export function seconds(value: number | null | undefined): string {
  if (value === null || value === undefined) return "—";
  return value < 10 ? `${value.toFixed(2)} s` : `${value.toFixed(1)} s`;
}
