/** Whether live updates are flowing, for the top bar: never "Offline" while the network is up. */
import { useContext } from "react";
import { LiveContext, type LiveState } from "./LiveUpdates";

const LABELS: Record<LiveState, string> = {
  open: "Live",
  connecting: "Connecting…",
  reconnecting: "Reconnecting…",
  offline: "Offline",
};

export function LiveStatus() {
  const state = useContext(LiveContext);
  return (
    <span className={`live live-${state}`} role="status" aria-live="polite" title="Live updates">
      {LABELS[state]}
    </span>
  );
}
