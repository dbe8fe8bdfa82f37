import { describe, expect, it } from "vitest";
import type { ChartOption } from "../components/Chart";
import { USAGE } from "./fixtures";
import { failureReasons, seconds, usageCharts } from "./usage";

/** The series of an option as name → data. */
function seriesOf(option: ChartOption): Record<string, unknown[]> {
  const series = (Array.isArray(option.series) ? option.series : [option.series]) as { name: string; data: unknown[] }[];
  return Object.fromEntries(series.map((item) => [item.name, item.data]));
}

function chart(key: string) {
  const found = usageCharts(USAGE).find((item) => item.key === key);
  if (!found) throw new Error(`no chart ${key}`);
  return found;
}

describe("the usage report as charts", () => {
  it("draws one chart per figure, in order", () => {
    expect(usageCharts(USAGE).map((item) => item.key)).toEqual(["concurrency", "sessions", "hours", "failures", "logon"]);
  });

  it("puts the buckets along the x axis, labelled in UTC", () => {
    const option = chart("concurrency").option as { xAxis: { data: string[] } };
    expect(option.xAxis.data).toEqual(["2026-01-10 08:00", "2026-01-10 09:00", "2026-01-10 10:00"]);
  });

  it("takes every value from the report", () => {
    expect(seriesOf(chart("concurrency").option)).toEqual({ Peak: [3, 1, 0], Mean: [1.5833, 0.75, 0] });
    expect(seriesOf(chart("sessions").option)).toEqual({ "Sessions started": [2, 0, 0], "Distinct users": [2, 1, 0] });
    expect(seriesOf(chart("hours").option)).toEqual({ "Connected hours": [1.5833, 0.75, 0] });
    expect(seriesOf(chart("logon").option)).toEqual({ Median: [2, null, null], "95th percentile": [10, null, null] });
  });

  it("stacks failed connections by reason, a series per reason", () => {
    expect(failureReasons(USAGE.buckets)).toEqual(["daemon_error", "desktop_unreachable"]);
    expect(seriesOf(chart("failures").option)).toEqual({ daemon_error: [0, 2, 0], desktop_unreachable: [0, 1, 0] });
    expect(chart("failures").label).toBe("Failed connections per hour by reason: daemon_error 2, desktop_unreachable 1.");
  });

  it("draws the failed connections as one series when none failed", () => {
    const quiet = { ...USAGE, buckets: USAGE.buckets.map((item) => ({ ...item, failed_by_reason: {}, failed_connections: 0 })) };
    const failures = usageCharts(quiet).find((item) => item.key === "failures")!;
    expect(seriesOf(failures.option)).toEqual({ "Failed connections": [0, 0, 0] });
    expect(failures.label).toBe("No failed connection in the period.");
  });

  it("says the totals in the charts' labels", () => {
    expect(chart("concurrency").label).toBe("Concurrent sessions per hour: peak 3, mean 0.7778 over the period.");
    expect(chart("logon").label).toContain("median 2.00 s, 95th percentile 10.0 s");
  });

  it("writes seconds for reading", () => {
    expect([seconds(null), seconds(0.1234), seconds(35)]).toEqual(["—", "0.12 s", "35.0 s"]);
  });
});
