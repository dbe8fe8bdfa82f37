/**
 * Schedules and capacity as chart series (pure): the schedule editor's preview of a week and
 * a pool's planned and recorded capacity, as ECharts options for `components/Chart.tsx`.
 *
 * Times are drawn in the schedule's time zone, whatever the browser's: every instant is turned
 * into the wall-clock time of that zone written as if it were UTC ({@link wallClock}) and the
 * chart uses UTC (`useUTC`), so the axis and the tooltip read the zone's local times. On the
 * days the clocks change, the plot has an hour more or less there, as the zone's clocks do.
 *
 * Planned targets are steps (`min_ready` and `spare` hold from one change to the next, the last
 * until the end of the period), the phases bands named at the top of the plot; what the pool
 * had is stacked areas (ready, in use, powered off, other), broken where no sample was recorded.
 */
import type { LineSeriesOption } from "echarts/charts";
import type { Schemas } from "../api/client";
import type { ChartOption } from "../components/Chart";

type PlannedTargets = Schemas["PlannedTargets"];
type CapacitySample = Schemas["CapacitySample"];

const MINUTE = 60_000;
const DAY = 24 * 60 * MINUTE;
/** Samples further apart than this are not joined by a line (the reconciler records one per 5 minutes). */
export const SAMPLE_GAP = 15 * MINUTE;

/** The series' colours (the browser test looks for the planned `min_ready` step's pixels). */
export const COLORS = {
  min_ready: "#1864ab",
  spare: "#e8590c",
  ready: "#2f9e44",
  in_use: "#7048e8",
  powered_off: "#868e96",
  other: "#f59f00",
  now: "#c92a2a",
} as const;

/** Light bands behind the phases, in turn; exceptions get their own. */
const BANDS = ["rgba(24, 100, 171, 0.08)", "rgba(24, 100, 171, 0.02)"];
const EXCEPTION_BAND = "rgba(232, 89, 12, 0.12)";

const formatters = new Map<string, Intl.DateTimeFormat>();

function formatter(zone: string): Intl.DateTimeFormat {
  let found = formatters.get(zone);
  if (!found) {
    try {
      found = new Intl.DateTimeFormat("en-US", {
        timeZone: zone,
        hourCycle: "h23",
        year: "numeric",
        month: "2-digit",
        day: "2-digit",
        hour: "2-digit",
        minute: "2-digit",
        second: "2-digit",
      });
    } catch {
      // Not a zone (yet: the user is typing one): UTC.
      found = formatter("UTC");
    }
    formatters.set(zone, found);
  }
  return found;
}

/** The wall-clock time in `zone` at `instant` (ms), as milliseconds of the same reading in UTC. */
export function wallClock(instant: number, zone: string): number {
  const parts: Record<string, number> = {};
  for (const part of formatter(zone).formatToParts(new Date(instant))) {
    if (part.type !== "literal") parts[part.type] = Number(part.value);
  }
  const whole = Date.UTC(parts.year!, parts.month! - 1, parts.day!, parts.hour! % 24, parts.minute!, parts.second!);
  return whole + (((instant % 1000) + 1000) % 1000);
}

/** The instant (ms) of local midnight starting `day` (YYYY-MM-DD) in `zone`. */
export function zonedMidnight(day: string, zone: string): number {
  const wall = Date.parse(`${day}T00:00:00Z`);
  let instant = wall - (wallClock(wall, zone) - wall);
  // Once more, with the offset at the first guess (they differ only next to a clock change).
  instant = wall - (wallClock(instant, zone) - instant);
  return instant;
}

/** The date (YYYY-MM-DD) `days` after `day`. */
export function addDays(day: string, days: number): string {
  return new Date(Date.parse(`${day}T00:00:00Z`) + days * DAY).toISOString().slice(0, 10);
}

/** The date of the Monday of the week `instant` is in, in `zone`. */
export function weekStart(instant: number, zone: string): string {
  const wall = new Date(wallClock(instant, zone));
  const sinceMonday = (wall.getUTCDay() + 6) % 7;
  return addDays(wall.toISOString().slice(0, 10), -sinceMonday);
}

/** A wall-clock reading (from {@link wallClock}) as `Mon 2026-11-23 07:00`. */
export function wallText(wall: number): string {
  const date = new Date(wall);
  const day = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"][date.getUTCDay()];
  return `${day} ${date.toISOString().slice(0, 16).replace("T", " ")}`;
}

/** What a band is called: the phase, or the exception that runs it. */
export function phaseLabel(entry: Pick<PlannedTargets, "phase" | "exception">): string {
  if (entry.exception && entry.phase && entry.phase !== entry.exception) return `${entry.exception}: ${entry.phase}`;
  return entry.exception ?? entry.phase ?? "no schedule";
}

/**
 * The phase a schedule has in force now, in words, its start in the schedule's zone
 * (`peak since Mon 2026-11-23 07:00`, `off-peak (christmas) since Thu 2026-12-24 00:00`).
 */
export function inForceText(schedule: Pick<Schemas["Schedule"], "in_force" | "time_zone">): string {
  const found = schedule.in_force;
  if (!found) return "none";
  const what = found.exception && found.exception !== found.phase ? `${found.phase} (${found.exception})` : found.phase;
  return `${what} since ${wallText(wallClock(Date.parse(found.since), schedule.time_zone))}`;
}

export interface PhaseSpan {
  label: string;
  exception: boolean;
  /** Wall-clock ms. */
  from: number;
  to: number;
}

export interface Steps {
  min_ready: [number, number][];
  spare: [number, number][];
  phases: PhaseSpan[];
}

/**
 * The planned targets from `start` to `end` (instants, ms) as step points in wall-clock ms:
 * a point at each change (an entry before `start` counts from `start`) and one at `end`
 * holding the last value, and the span of each phase.
 */
export function plannedSteps(planned: PlannedTargets[], start: number, end: number, zone: string): Steps {
  const entries = planned
    .map((entry) => ({ entry, at: Math.max(Date.parse(entry.since), start) }))
    .filter(({ at }) => at < end)
    .sort((a, b) => a.at - b.at);
  const steps: Steps = { min_ready: [], spare: [], phases: [] };
  entries.forEach(({ entry, at }, index) => {
    const x = wallClock(at, zone);
    const until = wallClock(entries[index + 1]?.at ?? end, zone);
    steps.min_ready.push([x, entry.min_ready]);
    steps.spare.push([x, entry.spare]);
    if (entry.phase !== null || entry.exception !== null) {
      steps.phases.push({ label: phaseLabel(entry), exception: entry.exception !== null, from: x, to: until });
    }
  });
  const last = entries[entries.length - 1];
  if (last) {
    steps.min_ready.push([wallClock(end, zone), last.entry.min_ready]);
    steps.spare.push([wallClock(end, zone), last.entry.spare]);
  }
  return steps;
}

export type SampleKey = "ready" | "in_use" | "powered_off" | "other";
export const SAMPLE_KEYS: readonly SampleKey[] = ["ready", "in_use", "powered_off", "other"];
export const SAMPLE_NAMES: Record<SampleKey, string> = {
  ready: "ready",
  in_use: "in use",
  powered_off: "powered off",
  other: "other (building, failed…)",
};

/**
 * The recorded samples as one series per count, in time order, in wall-clock ms; a `null`
 * point between two samples more than {@link SAMPLE_GAP} apart breaks the line there.
 */
export function sampleSeries(samples: CapacitySample[], zone: string): Record<SampleKey, [number, number | null][]> {
  const out: Record<SampleKey, [number, number | null][]> = { ready: [], in_use: [], powered_off: [], other: [] };
  const sorted = [...samples].sort((a, b) => Date.parse(a.at) - Date.parse(b.at));
  let previous: number | null = null;
  for (const sample of sorted) {
    const at = Date.parse(sample.at);
    if (previous !== null && at - previous > SAMPLE_GAP) {
      const gap = wallClock(previous + (at - previous) / 2, zone);
      for (const key of SAMPLE_KEYS) out[key].push([gap, null]);
    }
    const x = wallClock(at, zone);
    for (const key of SAMPLE_KEYS) out[key].push([x, sample[key]]);
    previous = at;
  }
  return out;
}

/** Each phase once, with what it asks (`peak: 10 ready, 2 spare`), in the order they first appear. */
export function phaseTargets(planned: PlannedTargets[]): string[] {
  const seen = new Map<string, string>();
  for (const entry of planned) {
    const label = phaseLabel(entry);
    if (!seen.has(label)) {
      const idle = entry.idle === "power_off" ? ", idle powered off" : "";
      seen.set(label, `${label}: ${entry.min_ready} ready, ${entry.spare} spare${idle}`);
    }
  }
  return [...seen.values()];
}

/** Bands narrower than this share of the period are drawn without their name (it would not fit). */
export const LABEL_SHARE = 0.03;

export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

/** What the tooltip of an axis trigger is given, per series (the part used here). */
export interface TooltipItem {
  axisValue?: number | string;
  seriesName?: string;
  value?: unknown;
}

/**
 * The tooltip at a point of the time axis: the time, the phase in force there, each series' value.
 * Markup without a style attribute: the console's `style-src 'self'` would refuse one (ECharts'
 * own series markers are such inline styles, so they are left out).
 */
export function tooltipHtml(items: TooltipItem[], phases: PhaseSpan[]): string {
  const x = Number(items[0]?.axisValue);
  if (!Number.isFinite(x)) return "";
  const phase = phases.find((span) => span.from <= x && x < span.to);
  const lines = [`<strong>${escapeHtml(wallText(x))}</strong>`];
  if (phase) lines.push(`phase: ${escapeHtml(phase.label)}`);
  for (const item of items) {
    const value = Array.isArray(item.value) ? item.value[1] : item.value;
    if (value === null || value === undefined) continue;
    lines.push(`${escapeHtml(item.seriesName ?? "")}: ${escapeHtml(String(value))}`);
  }
  return lines.join("<br/>");
}

function baseOption(start: number, end: number, zone: string, phases: PhaseSpan[]): ChartOption {
  return {
    useUTC: true,
    animation: false,
    grid: { left: 48, right: 24, top: 56, bottom: 36 },
    legend: { top: 0 },
    tooltip: { trigger: "axis", formatter: (params) => tooltipHtml((Array.isArray(params) ? params : [params]) as TooltipItem[], phases) },
    xAxis: {
      type: "time",
      min: wallClock(start, zone),
      max: wallClock(end, zone),
      name: zone,
      nameLocation: "end",
      nameGap: 4,
      axisLabel: { formatter: { month: "{ee} {d} {MMM}", day: "{ee} {d}", hour: "{HH}:{mm}", minute: "{HH}:{mm}" } },
    },
    yAxis: { type: "value", minInterval: 1, name: "desktops" },
  };
}

function plannedSeries(steps: Steps, now: number | null, zone: string): LineSeriesOption[] {
  const first = steps.min_ready[0]?.[0] ?? 0;
  const period = (steps.min_ready[steps.min_ready.length - 1]?.[0] ?? first) - first;
  return [
    {
      type: "line",
      name: "planned ready (min_ready)",
      step: "end",
      symbol: "none",
      data: steps.min_ready,
      color: COLORS.min_ready,
      lineStyle: { width: 3 },
      markArea: {
        silent: true,
        label: { position: "insideTop", fontSize: 11, color: "#343a40" },
        data: steps.phases.map((span, index) => [
          {
            name: span.to - span.from >= LABEL_SHARE * period ? span.label : "",
            xAxis: span.from,
            itemStyle: { color: span.exception ? EXCEPTION_BAND : BANDS[index % BANDS.length] },
          },
          { xAxis: span.to },
        ]),
      },
      ...(now === null
        ? {}
        : {
            markLine: {
              silent: true,
              symbol: "none",
              lineStyle: { color: COLORS.now, type: "solid", width: 2 },
              label: { formatter: "now", color: COLORS.now },
              data: [{ xAxis: wallClock(now, zone) }],
            },
          }),
    },
    {
      type: "line",
      name: "planned spare",
      step: "end",
      symbol: "none",
      data: steps.spare,
      color: COLORS.spare,
      lineStyle: { width: 2, type: "dashed" },
    },
  ];
}

/** The editor's preview: the targets a schedule sets over a week, with the phases named. */
export function previewOption(items: PlannedTargets[], start: number, end: number, zone: string): ChartOption {
  const steps = plannedSteps(items, start, end, zone);
  return { ...baseOption(start, end, zone, steps.phases), series: plannedSeries(steps, null, zone) };
}

/** The preview in words (the chart's text for screen readers and tests). */
export function previewSummary(items: PlannedTargets[], start: number, zone: string): string {
  if (!items.length) return `No phase is in force in the week from ${wallText(wallClock(start, zone))} (${zone}).`;
  const exceptions = [...new Set(items.map((item) => item.exception).filter((name): name is string => Boolean(name)))];
  return (
    `The week from ${wallText(wallClock(start, zone))} (${zone}): ${items.length} ` +
    `${items.length === 1 ? "phase" : "phases in turn"}; ${phaseTargets(items).join("; ")}.` +
    (exceptions.length ? ` Exceptions: ${exceptions.join(", ")}.` : "")
  );
}

/** A pool's capacity: planned steps and phases, the recorded counts stacked, and a "now" line. */
export function capacityOption(
  capacity: Schemas["Capacity"],
  start: number,
  end: number,
  now: number,
  zone: string,
): ChartOption {
  const samples = sampleSeries(capacity.actual, zone);
  // A line needs two samples: a pool with fewer shows them as dots.
  const sparse = capacity.actual.length < 2;
  const recorded = SAMPLE_KEYS.map((key): LineSeriesOption => ({
    type: "line",
    name: SAMPLE_NAMES[key],
    stack: "recorded",
    symbol: sparse ? "circle" : "none",
    // Stacked zeros would hide the count that is there under the dot of another series.
    symbolSize: (value: unknown) => (Array.isArray(value) && value[1] ? 6 : 0),
    data: samples[key],
    color: COLORS[key],
    lineStyle: { width: 1 },
    areaStyle: { opacity: 0.35 },
  }));
  const steps = plannedSteps(capacity.planned, start, end, zone);
  return {
    ...baseOption(start, end, zone, steps.phases),
    // Two weeks of 5-minute samples: Ctrl + wheel zooms into a day, dragging moves along.
    dataZoom: [{ type: "inside", filterMode: "none", zoomOnMouseWheel: "ctrl", moveOnMouseWheel: false }],
    series: [...recorded, ...plannedSeries(steps, now, zone)],
  };
}

/** The capacity plot in words. */
export function capacitySummary(capacity: Schemas["Capacity"], zone: string): string {
  const planned = capacity.planned.length ? `Planned: ${phaseTargets(capacity.planned).join("; ")}.` : "Nothing planned.";
  const latest = [...capacity.actual].sort((a, b) => Date.parse(a.at) - Date.parse(b.at)).pop();
  const recorded = latest
    ? ` Recorded: ${capacity.actual.length} ${capacity.actual.length === 1 ? "sample" : "samples"}; the latest ` +
      `(${wallText(wallClock(Date.parse(latest.at), zone))} ${zone}): ${latest.ready} ready, ${latest.in_use} in use, ` +
      `${latest.powered_off} powered off, ${latest.other} other.`
    : " No sample recorded yet.";
  return planned + recorded;
}
