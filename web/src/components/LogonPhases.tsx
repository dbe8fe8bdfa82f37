/**
 * A pool's logon phases over a period: the median and 95th percentile of each phase
 * (`GET /api/v1/reports/logon-phases`, which needs `reports:read`), as a chart and a table.
 */
import { useQuery } from "@tanstack/react-query";
import { useMemo, useState } from "react";
import { unwrap } from "../api/client";
import { words } from "../format";
import { phasePercentilesLabel, phasePercentilesOption } from "../reports/logon";
import { PRESETS, presetPeriod, type PresetKey } from "../reports/period";
import { seconds } from "../reports/usage";
import { useSession } from "../session";
import { Chart } from "./Chart";
import { SelectField } from "./Field";
import { ProblemAlert } from "./Problem";

export function LogonPhases({ poolId }: { poolId: string }) {
  const { api } = useSession();
  const [preset, setPreset] = useState<PresetKey>("7d");
  const [now, setNow] = useState(() => Date.now());
  const period = presetPeriod(preset, "hour", now);
  const report = useQuery({
    queryKey: ["pool", poolId, "logon-phases", period],
    queryFn: () =>
      unwrap(api.GET("/api/v1/reports/logon-phases", { params: { query: { ...period, pool_id: poolId } } })),
  });
  const option = useMemo(() => (report.data ? phasePercentilesOption(report.data) : null), [report.data]);
  const data = report.data;
  return (
    <section aria-labelledby="logon-phases-title">
      <h2 id="logon-phases-title">Logon phases</h2>
      <div className="inline-form">
        <SelectField
          label="Logons asked in"
          value={preset}
          onChange={(event) => {
            setPreset(event.target.value as PresetKey);
            setNow(Date.now());
          }}
        >
          {PRESETS.map((item) => (
            <option key={item.key} value={item.key}>
              {item.label}
            </option>
          ))}
        </SelectField>
      </div>
      <ProblemAlert error={report.error} />
      {data && option ? (
        <>
          <p data-testid="logon-phase-counts">
            {data.logons} logons: {data.connected} connected, {data.failed} failed, {data.pending} under way. Request to
            first frame: median {seconds(data.to_first_frame.seconds_p50)}, 95th percentile{" "}
            {seconds(data.to_first_frame.seconds_p95)}.
          </p>
          <Chart
            option={option}
            label={phasePercentilesLabel(data)}
            testId="logon-phase-chart"
            caption="Each phase: seconds from the phase reached before it."
          />
          <table data-testid="logon-phase-table">
            <caption>Logon phases, median and 95th percentile</caption>
            <thead>
              <tr>
                <th scope="col">Phase</th>
                <th scope="col">Logons that reached it</th>
                <th scope="col">Median</th>
                <th scope="col">95th percentile</th>
              </tr>
            </thead>
            <tbody>
              {data.phases.map((phase) => (
                <tr key={phase.phase}>
                  <th scope="row">{words(phase.phase)}</th>
                  <td>{phase.reached}</td>
                  <td>{seconds(phase.seconds_p50)}</td>
                  <td>{seconds(phase.seconds_p95)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </>
      ) : null}
    </section>
  );
}
