/**
 * A report's period: the presets (last 24 hours, 7 days, 30 days) and a custom one, with the
 * bucket size that suits each, checked as the API checks them (so the page can say what is wrong
 * before asking).
 *
 * Buckets are UTC hours or days and the API widens a period to whole buckets; a preset ends at
 * the end of the current bucket so it holds exactly as many buckets as it says.
 */

export type Bucket = "hour" | "day";
export type PresetKey = "24h" | "7d" | "30d";

const HOUR = 3_600_000;
const DAY = 24 * HOUR;

export const PRESETS: { key: PresetKey; label: string; length: number; bucket: Bucket }[] = [
  { key: "24h", label: "Last 24 hours", length: DAY, bucket: "hour" },
  { key: "7d", label: "Last 7 days", length: 7 * DAY, bucket: "hour" },
  { key: "30d", label: "Last 30 days", length: 30 * DAY, bucket: "day" },
];

/** The most buckets a report has (the API refuses more). */
export const MAX_BUCKETS: Record<Bucket, number> = { hour: 31 * 24, day: 366 };

/** A period as the API takes it: ISO instants, `to` excluded. */
export interface Period {
  from: string;
  to: string;
}

/** The end of the UTC bucket holding `now` (`now` itself on a boundary). */
export function bucketEnd(now: number, bucket: Bucket): number {
  const size = bucket === "hour" ? HOUR : DAY;
  return Math.ceil(now / size) * size;
}

/** The preset's period, ending with the bucket that holds `now`. */
export function presetPeriod(key: PresetKey, bucket: Bucket, now: number): Period {
  const preset = PRESETS.find((item) => item.key === key)!;
  const to = bucketEnd(now, bucket);
  return { from: new Date(to - preset.length).toISOString(), to: new Date(to).toISOString() };
}

/** The bucket size a preset starts with. */
export function presetBucket(key: PresetKey): Bucket {
  return PRESETS.find((item) => item.key === key)!.bucket;
}

/** A custom period from two `datetime-local` values (the browser's time zone), or why not. */
export function customPeriod(from: string, to: string): Period | string {
  const start = Date.parse(from);
  const end = Date.parse(to);
  if (Number.isNaN(start) || Number.isNaN(end)) return "Give both the start and the end.";
  if (end <= start) return "The end must be after the start.";
  return { from: new Date(start).toISOString(), to: new Date(end).toISOString() };
}

/** How many buckets the API makes of `period` (widened to whole buckets). */
export function bucketCount(period: Period, bucket: Bucket): number {
  const size = bucket === "hour" ? HOUR : DAY;
  const start = Math.floor(Date.parse(period.from) / size);
  const end = Math.ceil(Date.parse(period.to) / size);
  return end - start;
}

/** Why the API would refuse `period` in `bucket` buckets, or null. */
export function periodProblem(period: Period, bucket: Bucket): string | null {
  if (bucketCount(period, bucket) > MAX_BUCKETS[bucket]) {
    return `A report has at most ${MAX_BUCKETS[bucket]} ${bucket} buckets: choose day buckets or a shorter period.`;
  }
  return null;
}

/** A bucket's start as its label: `2026-01-10 08:00` by the hour, `2026-01-10` by the day (UTC). */
export function bucketLabel(start: string, bucket: Bucket): string {
  const iso = new Date(start).toISOString();
  return bucket === "hour" ? `${iso.slice(0, 10)} ${iso.slice(11, 16)}` : iso.slice(0, 10);
}
