/** How values read on screen. */

export function when(value: string | null | undefined): string {
  if (!value) return "—";
  const date = new Date(value);
  return Number.isNaN(date.getTime()) ? value : date.toLocaleString();
}

export function words(value: string | null | undefined): string {
  return value ? value.replace(/_/g, " ") : "—";
}

/** `words`, its first letter capitalised: a label's sentence case ("power_off" → "Power off"). */
export function sentence(value: string | null | undefined): string {
  const text = words(value);
  return text.charAt(0).toUpperCase() + text.slice(1);
}

export function bytes(value: number | null | undefined): string {
  if (value === null || value === undefined) return "—";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let size = value;
  let unit = 0;
  while (size >= 1024 && unit < units.length - 1) {
    size /= 1024;
    unit += 1;
  }
  return `${size.toFixed(unit ? 1 : 0)} ${units[unit]}`;
}
