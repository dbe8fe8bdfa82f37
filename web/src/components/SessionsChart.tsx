/** Sessions over the last day: how many were open in each hour, as bars (with a text table). */
import type { Schemas } from "../api/client";

type Session = Schemas["Session"];
const HOUR = 3_600_000;

/** Sessions open during each of the last 24 hours, oldest hour first. */
export function openPerHour(sessions: Session[], now: number): number[] {
  const start = now - 24 * HOUR;
  const counts = new Array<number>(24).fill(0);
  for (const session of sessions) {
    const from = Date.parse(session.started_at);
    const to = session.ended_at ? Date.parse(session.ended_at) : now;
    for (let hour = 0; hour < 24; hour += 1) {
      const begins = start + hour * HOUR;
      if (from < begins + HOUR && to >= begins) counts[hour]! += 1;
    }
  }
  return counts;
}

export function SessionsChart({ sessions, now = Date.now() }: { sessions: Session[]; now?: number }) {
  const counts = openPerHour(sessions, now);
  const peak = Math.max(1, ...counts);
  const label = `Sessions open per hour over the last day; peak ${Math.max(...counts)}, now ${counts[23]}.`;
  return (
    <figure className="chart">
      <div className="chart-bars" role="img" aria-label={label}>
        {counts.map((count, hour) => (
          <span key={hour} style={{ height: `${(count / peak) * 100}%` }} title={`${24 - hour} h ago: ${count}`} />
        ))}
      </div>
      <figcaption>
        Sessions over the last day (peak {Math.max(...counts)}, now {counts[23]})
      </figcaption>
    </figure>
  );
}
