/**
 * Logon timing as charts: one logon's phases as a waterfall (a session's page), and the median
 * and 95th percentile of each phase over a period (a pool's page).
 *
 * In the waterfall each phase the logon reached is a bar from the instant it was reached to the
 * next step: the next phase reached, or, for the last phase of a failed logon, the instant it
 * stopped (the bar in the failure colour, and a last row saying why). The first frame, the
 * end of a logon that drew, is a thin mark.
 */
import type { Schemas } from "../api/client";
import type { ChartOption } from "../components/Chart";
import { words } from "../format";
import { COLORS } from "./palette";
import { axisTooltipOption } from "./tooltip";

type Logon = Schemas["Logon"];

export interface WaterfallRow {
  /** The phase (or `stopped` for the row of a failed logon's end). */
  phase: string;
  label: string;
  /** Seconds from the request to the phase. */
  start: number;
  /** Seconds from the request to the next step. */
  end: number;
  failed: boolean;
}

/** The waterfall's rows, in order: every phase reached, then why it stopped if it failed. */
export function waterfallRows(logon: Logon): WaterfallRow[] {
  const phases = logon.phases;
  if (!phases.length) return [];
  const origin = Date.parse(phases[0]!.at);
  const offset = (at: string) => (Date.parse(at) - origin) / 1000;
  const stopped = logon.outcome === "failed" && logon.failed_at ? offset(logon.failed_at) : null;
  const rows: WaterfallRow[] = phases.map((phase, index) => {
    const next = phases[index + 1];
    const start = offset(phase.at);
    const last = next === undefined;
    return {
      phase: phase.phase,
      label: words(phase.phase),
      start,
      end: next ? offset(next.at) : (stopped ?? start),
      failed: last && stopped !== null,
    };
  });
  if (stopped !== null) {
    rows.push({
      phase: "stopped",
      label: `stopped: ${words(logon.failure_reason)}`,
      start: stopped,
      end: stopped,
      failed: true,
    });
  }
  return rows;
}

/** A sentence for the waterfall, for screen readers and tests. */
export function waterfallLabel(logon: Logon): string {
  const reached = logon.phases.map((phase) => `${words(phase.phase)} at +${phase.seconds.toFixed(3)} s`).join(", ");
  const end =
    logon.outcome === "connected"
      ? `first frame after ${logon.duration_seconds?.toFixed(3)} s`
      : logon.outcome === "failed"
        ? `stopped: ${words(logon.failure_reason)}`
        : "still under way";
  return `Logon phases: ${reached}; ${end}.`;
}

/** The name of the waterfall's invisible series (each row's start). */
const OFFSET = "from the request";

/** The waterfall: a transparent bar to each row's start, then the row's own bar. */
export function waterfallOption(rows: WaterfallRow[]): ChartOption {
  return {
    animation: false,
    tooltip: { ...axisTooltipOption((value) => `${value.toFixed(3)} s`, [OFFSET]), axisPointer: { type: "shadow" } },
    grid: { left: 170, right: 24, top: 16, bottom: 40 },
    xAxis: { type: "value", name: "seconds since the request", nameLocation: "middle", nameGap: 26 },
    yAxis: { type: "category", inverse: true, data: rows.map((row) => row.label) },
    series: [
      {
        type: "bar",
        name: OFFSET,
        stack: "waterfall",
        silent: true,
        itemStyle: { color: "transparent" },
        data: rows.map((row) => row.start),
      },
      {
        type: "bar",
        name: "lasted",
        stack: "waterfall",
        barMinHeight: 3,
        data: rows.map((row) => ({
          value: Number((row.end - row.start).toFixed(3)),
          itemStyle: { color: row.failed ? COLORS.failure : row.phase === "first_frame" ? COLORS.tertiary : COLORS.primary },
        })),
      },
    ],
  };
}

type PhaseReport = Schemas["LogonPhasesReport"];

/** The median and 95th percentile of each phase, as grouped bars (phases in order). */
export function phasePercentilesOption(report: PhaseReport): ChartOption {
  const phases = report.phases;
  return {
    animation: false,
    color: [COLORS.primary, COLORS.secondary],
    tooltip: axisTooltipOption((value) => `${value} s`),
    legend: { top: 0 },
    grid: { left: 48, right: 16, top: 32, bottom: 48 },
    xAxis: { type: "category", data: phases.map((phase) => words(phase.phase)), axisLabel: { interval: 0, rotate: 20 } },
    yAxis: { type: "value", name: "seconds" },
    series: [
      { type: "bar", name: "Median", data: phases.map((phase) => phase.seconds_p50), itemStyle: { color: COLORS.primary } },
      { type: "bar", name: "95th percentile", data: phases.map((phase) => phase.seconds_p95), itemStyle: { color: COLORS.secondary } },
    ],
  };
}

/** A sentence for the percentiles chart. */
export function phasePercentilesLabel(report: PhaseReport): string {
  const parts = report.phases
    .filter((phase) => phase.reached > 0)
    .map((phase) => `${words(phase.phase)} median ${phase.seconds_p50} s, 95th ${phase.seconds_p95} s`);
  return `Logon phases over ${report.logons} logons: ${parts.join("; ") || "none reached"}.`;
}
