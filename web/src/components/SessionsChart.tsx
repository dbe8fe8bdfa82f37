/** Sessions over the last day, hour by hour, drawn by the console's chart component. */
import type { HourlySessions } from "../reports/sessions";
import { hourlyOption } from "../reports/sessions";
import { Chart } from "./Chart";
import { useMemo } from "react";

export function SessionsChart({ hourly }: { hourly: HourlySessions }) {
  const option = useMemo(() => hourlyOption(hourly), [hourly]);
  const peak = Math.max(0, ...hourly.counts);
  const last = hourly.counts[hourly.counts.length - 1] ?? 0;
  return (
    <Chart
      option={option}
      testId="sessions-chart"
      height="12rem"
      label={`${hourly.measure} per hour over the last day (UTC); peak ${peak}, this hour ${last}.`}
      caption={`Sessions over the last day: ${hourly.measure} per hour (UTC), peak ${peak}, this hour ${last}`}
    />
  );
}
