import { describe, expect, it } from "vitest";
import type { Schemas } from "../api/client";
import {
  addDays,
  capacityOption,
  capacitySummary,
  COLORS,
  inForceText,
  phaseLabel,
  plannedSteps,
  previewOption,
  previewSummary,
  sampleSeries,
  tooltipHtml,
  wallClock,
  weekStart,
  zonedMidnight,
} from "./chart";

type Planned = Schemas["PlannedTargets"];
const at = (iso: string) => Date.parse(iso);
const planned = (since: string, phase: string | null, min_ready: number, spare: number, exception: string | null = null): Planned => ({
  since,
  phase,
  exception,
  min_ready,
  spare,
  idle: phase === "off-peak" ? "power_off" : "keep",
});
const sample = (when: string, ready: number, in_use = 0, powered_off = 0, other = 0): Schemas["CapacitySample"] => ({
  at: when,
  ready,
  in_use,
  powered_off,
  other,
  phase: null,
  min_ready: null,
  spare: null,
});

describe("wall-clock time in a zone", () => {
  it("reads an instant as the zone's clock, across the change to summer time", () => {
    // Berlin: UTC+1 in winter, UTC+2 from 01:00 UTC on the last Sunday of March.
    expect(wallClock(at("2026-03-29T00:30:00Z"), "Europe/Berlin")).toBe(at("2026-03-29T01:30:00Z"));
    expect(wallClock(at("2026-03-29T01:30:00Z"), "Europe/Berlin")).toBe(at("2026-03-29T03:30:00Z"));
    expect(wallClock(at("2026-07-01T12:00:00.250Z"), "UTC")).toBe(at("2026-07-01T12:00:00.250Z"));
    expect(wallClock(at("2026-01-01T03:00:00Z"), "America/New_York")).toBe(at("2025-12-31T22:00:00Z"));
  });

  it("finds a local midnight, on a day the clocks change too", () => {
    expect(zonedMidnight("2026-11-23", "Europe/Berlin")).toBe(at("2026-11-22T23:00:00Z"));
    expect(zonedMidnight("2026-03-29", "Europe/Berlin")).toBe(at("2026-03-28T23:00:00Z"));
    expect(zonedMidnight("2026-03-30", "Europe/Berlin")).toBe(at("2026-03-29T22:00:00Z"));
    expect(zonedMidnight("2026-06-01", "UTC")).toBe(at("2026-06-01T00:00:00Z"));
  });

  it("finds the Monday of the week in the zone", () => {
    // Sunday 23:30 UTC is already Monday in Berlin.
    expect(weekStart(at("2026-11-29T23:30:00Z"), "Europe/Berlin")).toBe("2026-11-30");
    expect(weekStart(at("2026-11-29T23:30:00Z"), "UTC")).toBe("2026-11-23");
    expect(addDays("2026-12-28", 7)).toBe("2027-01-04");
  });
});

describe("planned targets as steps", () => {
  const start = at("2026-11-23T00:00:00Z");
  const end = at("2026-11-24T00:00:00Z");
  const items = [
    planned("2026-11-20T18:00:00Z", "off-peak", 0, 1),
    planned("2026-11-23T06:00:00Z", "peak", 10, 2),
    planned("2026-11-23T18:00:00Z", "off-peak", 0, 1),
  ];

  it("holds each value until the next change, the last until the end", () => {
    const steps = plannedSteps(items, start, end, "UTC");
    expect(steps.min_ready).toEqual([
      [start, 0], // an entry from before the period counts from its start
      [at("2026-11-23T06:00:00Z"), 10],
      [at("2026-11-23T18:00:00Z"), 0],
      [end, 0],
    ]);
    expect(steps.spare.map(([, value]) => value)).toEqual([1, 2, 1, 1]);
    expect(steps.phases).toEqual([
      { label: "off-peak", exception: false, from: start, to: at("2026-11-23T06:00:00Z") },
      { label: "peak", exception: false, from: at("2026-11-23T06:00:00Z"), to: at("2026-11-23T18:00:00Z") },
      { label: "off-peak", exception: false, from: at("2026-11-23T18:00:00Z"), to: end },
    ]);
  });

  it("draws them in the schedule's zone", () => {
    const steps = plannedSteps(items, start, end, "Europe/Berlin");
    expect(steps.min_ready[1]).toEqual([at("2026-11-23T07:00:00Z"), 10]);
  });

  it("names an exception and the phase it runs", () => {
    expect(phaseLabel({ phase: "off-peak", exception: "christmas" })).toBe("christmas: off-peak");
    expect(phaseLabel({ phase: "exam day", exception: "exam day" })).toBe("exam day");
    expect(phaseLabel({ phase: null, exception: null })).toBe("no schedule");
    const steps = plannedSteps([planned("2026-11-23T00:00:00Z", "off-peak", 0, 1, "christmas")], start, end, "UTC");
    expect(steps.phases).toEqual([{ label: "christmas: off-peak", exception: true, from: start, to: end }]);
  });

  it("has no band for a pool without a schedule, and nothing for an empty plan", () => {
    expect(plannedSteps([planned("2026-11-23T00:00:00Z", null, 2, 1)], start, end, "UTC").phases).toEqual([]);
    expect(plannedSteps([], start, end, "UTC")).toEqual({ min_ready: [], spare: [], phases: [] });
  });

  it("become the preview's series and its summary", () => {
    const option = previewOption(items, start, end, "UTC");
    const series = option.series as { name: string; step: string; data: unknown[]; color: string }[];
    expect(series.map((s) => [s.name, s.step, s.color])).toEqual([
      ["planned ready (min_ready)", "end", COLORS.min_ready],
      ["planned spare", "end", COLORS.spare],
    ]);
    expect(option.useUTC).toBe(true);
    expect(previewSummary(items, start, "UTC")).toBe(
      "The week from Mon 2026-11-23 00:00 (UTC): 3 phases in turn; off-peak: 0 ready, 1 spare, idle powered off; peak: 10 ready, 2 spare.",
    );
  });
});

describe("recorded samples", () => {
  it("are one series per count in time order, broken where none was recorded", () => {
    const series = sampleSeries(
      [
        sample("2026-11-23T10:05:00Z", 2, 1),
        sample("2026-11-23T10:00:00Z", 3, 0, 1),
        sample("2026-11-23T11:00:00Z", 1, 2, 0, 1),
      ],
      "UTC",
    );
    expect(series.ready).toEqual([
      [at("2026-11-23T10:00:00Z"), 3],
      [at("2026-11-23T10:05:00Z"), 2],
      [at("2026-11-23T10:32:30Z"), null],
      [at("2026-11-23T11:00:00Z"), 1],
    ]);
    expect(series.in_use.map(([, v]) => v)).toEqual([0, 1, null, 2]);
    expect(series.powered_off.map(([, v]) => v)).toEqual([1, 0, null, 0]);
    expect(series.other.map(([, v]) => v)).toEqual([0, 0, null, 1]);
  });

  it("are stacked under the planned steps with a now line, and summed up in words", () => {
    const capacity = {
      planned: [planned("2026-11-16T00:00:00Z", "peak", 3, 1)],
      actual: [sample("2026-11-23T10:00:00Z", 2, 1, 4)],
    };
    const start = at("2026-11-16T00:00:00Z");
    const end = at("2026-11-30T00:00:00Z");
    const now = at("2026-11-23T10:02:00Z");
    const option = capacityOption(capacity, start, end, now, "UTC");
    const series = option.series as { name: string; stack?: string; markLine?: { data: unknown[] } }[];
    expect(series.map((s) => [s.name, s.stack ?? null])).toEqual([
      ["ready", "recorded"],
      ["in use", "recorded"],
      ["powered off", "recorded"],
      ["other (building, failed…)", "recorded"],
      ["planned ready (min_ready)", null],
      ["planned spare", null],
    ]);
    expect(series[4]!.markLine!.data).toEqual([{ xAxis: now }]);
    // One sample is no line: it is shown as a dot; two or more are lines.
    const dot = series[0] as { symbol?: string; symbolSize?: (value: unknown) => number };
    expect(dot.symbol).toBe("circle");
    expect([dot.symbolSize!([0, 2]), dot.symbolSize!([0, 0]), dot.symbolSize!([0, null])]).toEqual([6, 0, 0]);
    const lines = capacityOption({ ...capacity, actual: [...capacity.actual, sample("2026-11-23T10:05:00Z", 1)] }, start, end, now, "UTC");
    expect((lines.series as { symbol?: string }[])[0]!.symbol).toBe("none");
    expect(option.dataZoom).toEqual([{ type: "inside", filterMode: "none", zoomOnMouseWheel: "ctrl", moveOnMouseWheel: false }]);
    expect(capacitySummary(capacity, "UTC")).toBe(
      "Planned: peak: 3 ready, 1 spare. Recorded: 1 sample; the latest (Mon 2026-11-23 10:00 UTC): 2 ready, 1 in use, 4 powered off, 0 other.",
    );
    expect(capacitySummary({ planned: [], actual: [] }, "UTC")).toBe("Nothing planned. No sample recorded yet.");
  });
});

describe("the tooltip and the bands' names", () => {
  const phases = [
    { label: "peak", exception: false, from: at("2026-11-23T07:00:00Z"), to: at("2026-11-23T19:00:00Z") },
    { label: "<b>closed</b>", exception: true, from: at("2026-11-24T00:00:00Z"), to: at("2026-11-25T00:00:00Z") },
  ];

  it("says the time, the phase there and each value, escaped", () => {
    const html = tooltipHtml(
      [
        { axisValue: at("2026-11-24T10:00:00Z"), seriesName: "ready", value: [0, 2] },
        { axisValue: at("2026-11-24T10:00:00Z"), seriesName: "in use", value: [0, null] },
      ],
      phases,
    );
    expect(html).toBe("<strong>Tue 2026-11-24 10:00</strong><br/>phase: &#60;b&#62;closed&#60;/b&#62;<br/>ready: 2");
    expect(tooltipHtml([{ axisValue: at("2026-11-23T06:00:00Z"), seriesName: "spare", value: [0, 1] }], phases)).toBe(
      "<strong>Mon 2026-11-23 06:00</strong><br/>spare: 1",
    );
    expect(tooltipHtml([], phases)).toBe("");
  });

  it("names only the bands wide enough for a name", () => {
    const items = [
      planned("2026-11-23T00:00:00Z", "off-peak", 0, 1),
      planned("2026-11-23T07:00:00Z", "peak", 3, 1),
      planned("2026-11-23T07:30:00Z", "lunch", 2, 1),
    ];
    const option = previewOption(items, at("2026-11-23T00:00:00Z"), at("2026-11-30T00:00:00Z"), "UTC");
    const series = option.series as { markArea?: { data: [{ name: string }, unknown][] } }[];
    expect(series[0]!.markArea!.data.map(([band]) => band.name)).toEqual(["off-peak", "", "lunch"]);
  });

  it("says which phase is in force now", () => {
    const time_zone = "Europe/Berlin";
    expect(inForceText({ in_force: null, time_zone })).toBe("none");
    const since = "2026-12-23T23:00:00Z";
    expect(inForceText({ in_force: { phase: "off-peak", exception: "christmas", since }, time_zone })).toBe(
      "off-peak (christmas) since Thu 2026-12-24 00:00",
    );
    expect(inForceText({ in_force: { phase: "exam", exception: "exam", since }, time_zone: "UTC" })).toBe(
      "exam since Wed 2026-12-23 23:00",
    );
  });
});
