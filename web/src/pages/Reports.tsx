/**
 * Usage reports: a period (a preset or custom), a pool or all, hour or day buckets; the
 * report's figures as charts and as a table, and the same as a CSV file.
 */
import { useMutation, useQuery } from "@tanstack/react-query";
import { useMemo, useState } from "react";
import { unwrap, type Schemas } from "../api/client";
import { allPages } from "../api/lists";
import { can } from "../auth/permissions";
import { Chart } from "../components/Chart";
import { SelectField, TextField } from "../components/Field";
import { ProblemAlert } from "../components/Problem";
import { when, words } from "../format";
import { csvFileName, saveBlob } from "../reports/csv";
import {
  bucketLabel,
  customPeriod,
  PRESETS,
  periodProblem,
  presetBucket,
  presetPeriod,
  type Bucket,
  type Period,
  type PresetKey,
} from "../reports/period";
import { failureReasons, fetchUsage, seconds, usageCharts } from "../reports/usage";
import { useSession } from "../session";

type Figures = Schemas["UsageFigures"];

function FiguresRow({ figures, label, reasons }: { figures: Figures; label: string; reasons: string[] }) {
  return (
    <tr>
      <th scope="row">{label}</th>
      <td>{figures.peak_concurrent}</td>
      <td>{figures.mean_concurrent.toFixed(2)}</td>
      <td>{figures.sessions_started}</td>
      <td>{figures.distinct_users}</td>
      <td>{figures.connected_hours.toFixed(2)}</td>
      <td>{figures.logons}</td>
      <td>{figures.failed_connections}</td>
      {reasons.map((reason) => (
        <td key={reason}>{figures.failed_by_reason[reason] ?? 0}</td>
      ))}
      <td>{seconds(figures.logon_seconds_p50)}</td>
      <td>{seconds(figures.logon_seconds_p95)}</td>
    </tr>
  );
}

function ReportTable({ report }: { report: Schemas["UsageReport"] }) {
  const reasons = failureReasons(report.buckets);
  const bucket = report.bucket as Bucket;
  return (
    <div className="table-scroll">
      <table data-testid="usage-table">
        <caption>Usage by {bucket} (UTC)</caption>
        <thead>
          <tr>
            <th scope="col">{bucket === "hour" ? "Hour" : "Day"}</th>
            <th scope="col">Peak concurrent</th>
            <th scope="col">Mean concurrent</th>
            <th scope="col">Sessions started</th>
            <th scope="col">Distinct users</th>
            <th scope="col">Connected hours</th>
            <th scope="col">Logons</th>
            <th scope="col">Failed</th>
            {reasons.map((reason) => (
              <th scope="col" key={reason}>
                Failed: {words(reason)}
              </th>
            ))}
            <th scope="col">Logon median</th>
            <th scope="col">Logon 95th</th>
          </tr>
        </thead>
        <tbody>
          {report.buckets.map((figures) => (
            <FiguresRow key={figures.start} figures={figures} label={bucketLabel(figures.start, bucket)} reasons={reasons} />
          ))}
        </tbody>
        <tfoot>
          <FiguresRow figures={report.totals} label="Whole period" reasons={reasons} />
        </tfoot>
      </table>
    </div>
  );
}

export function ReportsPage() {
  const { api, me } = useSession();
  const [preset, setPreset] = useState<PresetKey | "custom">("24h");
  const [bucket, setBucket] = useState<Bucket>("hour");
  const [poolId, setPoolId] = useState("");
  const [customFrom, setCustomFrom] = useState("");
  const [customTo, setCustomTo] = useState("");
  const [now, setNow] = useState(() => Date.now());
  const pools = useQuery({
    queryKey: ["reports", "pools"],
    enabled: can(me, "pools:read"),
    queryFn: () => allPages((cursor, limit) => unwrap(api.GET("/api/v1/pools", { params: { query: { limit, cursor } } }))),
  });
  const period: Period | string = preset === "custom" ? customPeriod(customFrom, customTo) : presetPeriod(preset, bucket, now);
  const problem = typeof period === "string" ? period : periodProblem(period, bucket);
  const query = typeof period === "string" ? null : { ...period, bucket, pool_id: poolId || undefined };
  const report = useQuery({
    queryKey: ["reports", "usage", query],
    enabled: query !== null && problem === null,
    queryFn: () => fetchUsage(api, query!),
  });
  const charts = useMemo(() => (report.data ? usageCharts(report.data) : []), [report.data]);
  const poolName = pools.data?.find((pool) => pool.id === poolId)?.name ?? (poolId ? poolId : null);
  const download = useMutation({
    mutationFn: async () => {
      if (query === null || typeof period === "string") return;
      const blob = await unwrap(
        api.GET("/api/v1/reports/usage", { params: { query }, headers: { Accept: "text/csv" }, parseAs: "blob" }),
      );
      saveBlob(blob, csvFileName(period, bucket, poolName));
    },
  });
  const choosePreset = (value: PresetKey | "custom") => {
    setPreset(value);
    if (value !== "custom") {
      setBucket(presetBucket(value));
      setNow(Date.now());
    }
  };
  return (
    <section>
      <h1>Reports</h1>
      <p>
        Usage from the recorded sessions and logons: nothing is estimated. Buckets are UTC hours or days; the period is
        widened to whole buckets.
      </p>
      <form className="inline-form" aria-label="Report" onSubmit={(event) => event.preventDefault()}>
        <SelectField label="Period" value={preset} onChange={(event) => choosePreset(event.target.value as PresetKey | "custom")}>
          {PRESETS.map((item) => (
            <option key={item.key} value={item.key}>
              {item.label}
            </option>
          ))}
          <option value="custom">Custom</option>
        </SelectField>
        {preset === "custom" ? (
          <>
            <TextField label="From" type="datetime-local" value={customFrom} onChange={(event) => setCustomFrom(event.target.value)} />
            <TextField label="To" type="datetime-local" value={customTo} onChange={(event) => setCustomTo(event.target.value)} />
          </>
        ) : null}
        <SelectField label="Pool" value={poolId} onChange={(event) => setPoolId(event.target.value)}>
          <option value="">All pools</option>
          {pools.data?.map((pool) => (
            <option key={pool.id} value={pool.id}>
              {pool.name}
            </option>
          ))}
        </SelectField>
        <SelectField label="Bucket" value={bucket} onChange={(event) => setBucket(event.target.value as Bucket)}>
          <option value="hour">Hour</option>
          <option value="day">Day</option>
        </SelectField>
        <button
          type="button"
          className="secondary"
          disabled={!report.data || download.isPending}
          onClick={() => download.mutate()}
        >
          Download CSV
        </button>
      </form>
      {problem ? <p role="alert">{problem}</p> : null}
      <ProblemAlert error={report.error ?? download.error ?? pools.error} />
      {report.isFetching ? <p aria-busy="true">Computing the report…</p> : null}
      {report.data ? (
        <>
          <p className="meta" data-testid="report-period">
            {when(report.data.from)} to {when(report.data.to)} · {report.data.buckets.length} {report.data.bucket} buckets ·
            computed {when(report.data.generated_at)}
          </p>
          <div className="report-charts">
            {charts.map((chart) => (
              <article key={chart.key}>
                <h2>{chart.title}</h2>
                <Chart option={chart.option} label={chart.label} testId={`chart-${chart.key}`} height="14rem" />
              </article>
            ))}
          </div>
          <ReportTable report={report.data} />
        </>
      ) : null}
    </section>
  );
}
