/**
 * The report charts' tooltip: the bucket (or phase) under the pointer and each series' value,
 * as markup without a style attribute. The console runs under `style-src 'self'`, which refuses
 * inline styles, and ECharts' own tooltip markup (its series markers and layout) is made of them.
 */
import { escapeHtml } from "../schedules/chart";

/** What an axis tooltip is given, per series (the part used here). */
export interface AxisItem {
  axisValueLabel?: string;
  axisValue?: unknown;
  seriesName?: string;
  value?: unknown;
}

/**
 * The tooltip of the items under the pointer: the axis value in bold, then `series: value`
 * for each series with a value, except those named in `skip` (a waterfall's invisible offsets).
 */
export function axisTooltip(items: AxisItem | AxisItem[], format: (value: number) => string, skip: string[] = []): string {
  const list = Array.isArray(items) ? items : [items];
  const first = list[0];
  if (!first) return "";
  const head = first.axisValueLabel ?? String(first.axisValue ?? "");
  const lines = [`<strong>${escapeHtml(head)}</strong>`];
  for (const item of list) {
    if (skip.includes(item.seriesName ?? "")) continue;
    const value = Array.isArray(item.value) ? item.value[1] : item.value;
    if (typeof value !== "number" || !Number.isFinite(value)) continue;
    lines.push(`${escapeHtml(item.seriesName ?? "")}: ${escapeHtml(format(value))}`);
  }
  return lines.join("<br/>");
}

/** A tooltip option for an axis trigger drawn by {@link axisTooltip}. */
export function axisTooltipOption(format: (value: number) => string, skip: string[] = []) {
  return {
    trigger: "axis" as const,
    formatter: (params: unknown) => axisTooltip(params as AxisItem | AxisItem[], format, skip),
  };
}

/** A figure as the tooltip shows it: whole numbers as they are, others to 3 decimals at most. */
export function plain(value: number): string {
  return Number.isInteger(value) ? String(value) : String(Number(value.toFixed(3)));
}
