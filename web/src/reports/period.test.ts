import { describe, expect, it } from "vitest";
import { bucketCount, bucketEnd, bucketLabel, customPeriod, periodProblem, presetBucket, presetPeriod } from "./period";

const now = Date.parse("2026-01-10T12:34:56Z");

describe("report periods", () => {
  it("ends a preset with the bucket that holds now, so it has whole buckets", () => {
    expect(presetPeriod("24h", "hour", now)).toEqual({ from: "2026-01-09T13:00:00.000Z", to: "2026-01-10T13:00:00.000Z" });
    expect(presetPeriod("7d", "hour", now)).toEqual({ from: "2026-01-03T13:00:00.000Z", to: "2026-01-10T13:00:00.000Z" });
    expect(presetPeriod("30d", "day", now)).toEqual({ from: "2025-12-12T00:00:00.000Z", to: "2026-01-11T00:00:00.000Z" });
    expect(bucketCount(presetPeriod("24h", "hour", now), "hour")).toBe(24);
    expect(bucketCount(presetPeriod("30d", "day", now), "day")).toBe(30);
  });

  it("keeps a boundary as it is", () => {
    expect(bucketEnd(Date.parse("2026-01-10T12:00:00Z"), "hour")).toBe(Date.parse("2026-01-10T12:00:00Z"));
  });

  it("starts each preset with a bucket size that keeps the chart readable", () => {
    expect([presetBucket("24h"), presetBucket("7d"), presetBucket("30d")]).toEqual(["hour", "hour", "day"]);
  });

  it("reads a custom period and says what is wrong with it", () => {
    const period = customPeriod("2026-01-10T08:00Z", "2026-01-10T11:00Z");
    expect(period).toEqual({ from: "2026-01-10T08:00:00.000Z", to: "2026-01-10T11:00:00.000Z" });
    expect(customPeriod("2026-01-10T11:00Z", "2026-01-10T08:00Z")).toBe("The end must be after the start.");
    expect(customPeriod("", "2026-01-10T08:00Z")).toBe("Give both the start and the end.");
  });

  it("refuses what the API refuses: more than 744 hour buckets", () => {
    const long = { from: "2026-01-01T00:00:00Z", to: "2026-02-15T00:00:00Z" };
    expect(periodProblem(long, "hour")).toMatch(/at most 744 hour buckets/);
    expect(periodProblem(long, "day")).toBeNull();
    // Widened: 08:30 to 09:10 is two hour buckets.
    expect(bucketCount({ from: "2026-01-01T08:30:00Z", to: "2026-01-01T09:10:00Z" }, "hour")).toBe(2);
  });

  it("labels buckets in UTC", () => {
    expect(bucketLabel("2026-01-10T08:00:00+00:00", "hour")).toBe("2026-01-10 08:00");
    expect(bucketLabel("2026-01-10T00:00:00+00:00", "day")).toBe("2026-01-10");
  });
});
