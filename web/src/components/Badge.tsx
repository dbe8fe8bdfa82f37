/** A state or health shown as a word with a colour (never colour alone). */
import { words } from "../format";

const TONE: Record<string, string> = {
  ready: "ok",
  healthy: "ok",
  enabled: "ok",
  succeeded: "ok",
  success: "ok",
  in_use: "info",
  running: "info",
  open: "info",
  degraded: "warn",
  draining: "warn",
  provisioning: "info",
  starting: "info",
  waiting_for_agent: "info",
  waiting_for_windows: "info",
  refreshing: "info",
  powered_off: "muted",
  queued: "muted",
  disabled: "muted",
  cancelled: "muted",
  deleting: "muted",
  failing: "bad",
  failed: "bad",
  dead: "bad",
  failure: "bad",
  denied: "bad",
  allowed: "ok",
  cut: "warn",
  refused: "bad",
};

export function Badge({ value }: { value: string | null | undefined }) {
  const key = value ?? "";
  return <span className={`badge badge-${TONE[key] ?? "muted"}`}>{words(value)}</span>;
}
