/**
 * The usage report as a CSV file: its name, and how the browser saves it.
 *
 * The API answers CSV to `Accept: text/csv` with the caller's bearer token, which a plain link
 * cannot carry: the page fetches it (through the API client, which adds the token) and saves
 * the answer through a Blob URL.
 */
import type { Bucket, Period } from "./period";

/** `2026-01-10T08:00:00.000Z` → `20260110T0800Z`. */
function compact(instant: string): string {
  const iso = new Date(instant).toISOString();
  return `${iso.slice(0, 4)}${iso.slice(5, 7)}${iso.slice(8, 10)}T${iso.slice(11, 13)}${iso.slice(14, 16)}Z`;
}

/** A file name's part of a pool name: lower case letters, digits and dashes. */
export function slug(name: string): string {
  return (
    name
      .toLowerCase()
      .replace(/[^a-z0-9]+/g, "-")
      .replace(/^-+|-+$/g, "") || "pool"
  );
}

/** `deskpool-usage-<pool or all-pools>-<bucket>-<from>-<to>.csv`, instants in UTC. */
export function csvFileName(period: Period, bucket: Bucket, poolName: string | null): string {
  const scope = poolName === null ? "all-pools" : slug(poolName);
  return `deskpool-usage-${scope}-${bucket}-${compact(period.from)}-${compact(period.to)}.csv`;
}

/** Save `blob` as `name` (a Blob URL on a link clicked once, then released). */
export function saveBlob(blob: Blob, name: string): void {
  const url = URL.createObjectURL(blob);
  const link = document.createElement("a");
  link.href = url;
  link.download = name;
  link.hidden = true;
  document.body.append(link);
  link.click();
  link.remove();
  // The download has taken the URL by the next task.
  setTimeout(() => URL.revokeObjectURL(url), 0);
}
