import { describe, expect, it } from "vitest";
import type { Schemas } from "../api/client";
import { phasePercentilesLabel, phasePercentilesOption, waterfallLabel, waterfallOption, waterfallRows } from "./logon";
import { COLORS } from "./palette";

type Logon = Schemas["Logon"];
type Phase = Schemas["LogonPhase"];

const T0 = Date.parse("2026-01-10T08:00:00Z");
function phase(name: Phase["phase"], after: number, since: number): Phase {
  return { phase: name, at: new Date(T0 + after * 1000).toISOString(), seconds: since };
}

const CONNECTED: Logon = {
  id: "l1",
  outcome: "connected",
  phases: [
    phase("asked", 0, 0),
    phase("allocated", 0.2, 0.2),
    phase("guest_ready", 1.2, 1),
    phase("token_issued", 1.3, 0.1),
    phase("tunnel_opened", 2, 0.7),
    phase("daemon_connected", 2.5, 0.5),
    phase("first_frame", 3, 0.5),
  ],
  duration_seconds: 3,
  failed_at: null,
  failure_reason: null,
};

const FAILED: Logon = {
  id: "l2",
  outcome: "failed",
  phases: [phase("asked", 0, 0), phase("allocated", 0.5, 0.5), phase("guest_ready", 1, 0.5), phase("token_issued", 1.5, 0.5), phase("tunnel_opened", 2, 0.5)],
  duration_seconds: null,
  failed_at: new Date(T0 + 12_000).toISOString(),
  failure_reason: "daemon_error",
};

describe("a logon as a waterfall", () => {
  it("runs each phase's bar from the phase to the next step", () => {
    const rows = waterfallRows(CONNECTED);
    expect(rows.map((row) => [row.phase, row.start, row.end])).toEqual([
      ["asked", 0, 0.2],
      ["allocated", 0.2, 1.2],
      ["guest_ready", 1.2, 1.3],
      ["token_issued", 1.3, 2],
      ["tunnel_opened", 2, 2.5],
      ["daemon_connected", 2.5, 3],
      ["first_frame", 3, 3],
    ]);
    expect(rows.some((row) => row.failed)).toBe(false);
  });

  it("shows a failed logon's phases, its last one running to the stop, and why it stopped", () => {
    const rows = waterfallRows(FAILED);
    expect(rows.map((row) => row.phase)).toEqual(["asked", "allocated", "guest_ready", "token_issued", "tunnel_opened", "stopped"]);
    expect(rows[4]).toMatchObject({ start: 2, end: 12, failed: true });
    expect(rows[5]).toMatchObject({ label: "stopped: daemon error", start: 12, end: 12, failed: true });
    expect(waterfallLabel(FAILED)).toMatch(/stopped: daemon error\.$/);
  });

  it("stacks a transparent offset under each bar, the bar coloured by what it is", () => {
    const option = waterfallOption(waterfallRows(FAILED)) as {
      yAxis: { data: string[] };
      series: { data: (number | { value: number; itemStyle: { color: string } })[] }[];
    };
    expect(option.yAxis.data).toEqual(["asked", "allocated", "guest ready", "token issued", "tunnel opened", "stopped: daemon error"]);
    expect(option.series[0]!.data).toEqual([0, 0.5, 1, 1.5, 2, 12]);
    const bars = option.series[1]!.data as { value: number; itemStyle: { color: string } }[];
    expect(bars.map((bar) => bar.value)).toEqual([0.5, 0.5, 0.5, 0.5, 10, 0]);
    expect(bars[4]!.itemStyle.color).toBe(COLORS.failure);
    expect(bars[0]!.itemStyle.color).toBe(COLORS.primary);
  });

  it("says every phase and the duration in its label", () => {
    expect(waterfallLabel(CONNECTED)).toBe(
      "Logon phases: asked at +0.000 s, allocated at +0.200 s, guest ready at +1.000 s, token issued at +0.100 s, " +
        "tunnel opened at +0.700 s, daemon connected at +0.500 s, first frame at +0.500 s; first frame after 3.000 s.",
    );
  });

  it("has no rows for a logon without phases", () => {
    expect(waterfallRows({ ...CONNECTED, phases: [] })).toEqual([]);
  });
});

describe("a pool's phase percentiles", () => {
  const report: Schemas["LogonPhasesReport"] = {
    from: "2026-01-10T08:00:00+00:00",
    to: "2026-01-10T11:00:00+00:00",
    pool_id: "p",
    generated_at: "2026-01-12T00:00:00+00:00",
    logons: 3,
    connected: 2,
    failed: 1,
    pending: 0,
    phases: [
      { phase: "allocated", reached: 3, seconds_p50: 1, seconds_p95: 2 },
      { phase: "powered_on", reached: 0, seconds_p50: null, seconds_p95: null },
      { phase: "first_frame", reached: 2, seconds_p50: 1, seconds_p95: 1.5 },
    ],
    to_first_frame: { reached: 2, seconds_p50: 5.5, seconds_p95: 35 },
  };

  it("draws the median and the 95th percentile of each phase, in order", () => {
    const option = phasePercentilesOption(report) as { xAxis: { data: string[] }; series: { name: string; data: unknown[] }[] };
    expect(option.xAxis.data).toEqual(["allocated", "powered on", "first frame"]);
    expect(option.series.map((item) => [item.name, item.data])).toEqual([
      ["Median", [1, null, 1]],
      ["95th percentile", [2, null, 1.5]],
    ]);
  });

  it("says the phases some logon reached", () => {
    expect(phasePercentilesLabel(report)).toBe(
      "Logon phases over 3 logons: allocated median 1 s, 95th 2 s; first frame median 1 s, 95th 1.5 s.",
    );
  });
});
