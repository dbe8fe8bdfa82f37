/** Whether live updates are flowing, for the top bar. */
import { useContext } from "react";
import { LiveContext } from "./LiveUpdates";

export function LiveStatus() {
  const state = useContext(LiveContext);
  const label = state === "open" ? "Live" : state === "connecting" ? "Connecting…" : "Offline";
  return (
    <span className={`live live-${state}`} role="status" aria-live="polite" title="Live updates">
      {label}
    </span>
  );
}
