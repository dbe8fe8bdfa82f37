import { describe, expect, it } from "vitest";
import type { Schemas } from "../api/client";
import { USAGE } from "./fixtures";
import { fromSessions, fromUsage, hourlyOption, openPerHour } from "./sessions";

const now = Date.parse("2026-01-02T12:00:00Z");
const session = (started: string, ended: string | null) => ({ started_at: started, ended_at: ended }) as Schemas["Session"];

describe("sessions over the last day", () => {
  it("counts a session in every hour it was open", () => {
    const counts = openPerHour(
      [session("2026-01-02T09:30:00Z", "2026-01-02T10:10:00Z"), session("2026-01-02T11:50:00Z", null)],
      now,
    );
    expect(counts).toHaveLength(24);
    expect(counts[23]).toBe(1); // the open one, in the last hour
    expect(counts[21]).toBe(1); // 09:00-10:00 → hour 21 (09:00-10:00 is 3 h before 12:00)
    expect(counts[22]).toBe(1); // 10:00-11:00
    expect(counts.reduce((a, b) => a + b, 0)).toBe(3);
  });

  it("ignores sessions that ended before the day", () => {
    expect(openPerHour([session("2025-12-30T09:00:00Z", "2025-12-30T10:00:00Z")], now).every((c) => c === 0)).toBe(true);
  });

  it("labels the counted hours in UTC, oldest first", () => {
    const hourly = fromSessions([], now);
    expect(hourly.labels[0]).toBe("2026-01-01 12:00");
    expect(hourly.labels[23]).toBe("2026-01-02 11:00");
    expect(hourly.measure).toBe("sessions open");
  });

  it("takes the recorded peak of each hour from the usage report", () => {
    const hourly = fromUsage(USAGE);
    expect(hourly).toEqual({
      labels: ["2026-01-10 08:00", "2026-01-10 09:00", "2026-01-10 10:00"],
      counts: [3, 1, 0],
      measure: "peak concurrent sessions",
    });
    const option = hourlyOption(hourly) as { xAxis: { data: string[] }; series: { data: number[] }[] };
    expect(option.xAxis.data).toEqual(["08:00", "09:00", "10:00"]);
    expect(option.series[0]!.data).toEqual([3, 1, 0]);
  });
});
