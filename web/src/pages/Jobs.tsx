/** Jobs with their attempts and last error; retry the dead, cancel the queued. */
import { useMutation, useQueryClient } from "@tanstack/react-query";
import { useState } from "react";
import { unwrap, type Schemas } from "../api/client";
import { pageSize, useCursorList } from "../api/lists";
import { can } from "../auth/permissions";
import { Badge } from "../components/Badge";
import { DataTable } from "../components/DataTable";
import { SelectField } from "../components/Field";
import { ProblemAlert } from "../components/Problem";
import { when } from "../format";
import { useSession } from "../session";

type Job = Schemas["Job"];

/** Resource types whose records have a name: a job's without one names a deleted record. */
const NAMED = new Set(["desktops", "pools", "clusters"]);

/** How a job's resource reads: "desktop np-01", its id on hover; never the id instead. */
export function jobResource(job: Job): { text: string; title?: string } {
  if (!job.resource_type) return { text: "—" };
  const kind = job.resource_type.replace(/s$/, "").replace(/_/g, " ");
  const title = job.resource_id ? `${kind.charAt(0).toUpperCase()}${kind.slice(1)} id ${job.resource_id}` : undefined;
  if (job.resource_name) return { text: `${kind} ${job.resource_name}`, title };
  return { text: NAMED.has(job.resource_type) ? `deleted ${kind}` : kind, title };
}

function JobResource({ job }: { job: Job }) {
  const { text, title } = jobResource(job);
  return <span title={title}>{text}</span>;
}

export function JobsPage() {
  const { api, me } = useSession();
  const client = useQueryClient();
  const [state, setState] = useState<Job["state"] | "">("");
  const list = useCursorList(["jobs", state], (cursor) =>
    unwrap(api.GET("/api/v1/jobs", { params: { query: { limit: pageSize(cursor), cursor, state: state || undefined } } })),
  );
  const act = useMutation({
    mutationFn: ({ job, action }: { job: Job; action: "retry" | "cancel" }) =>
      action === "retry"
        ? unwrap(api.POST("/api/v1/jobs/{id}/retry", { params: { path: { id: String(job.id) } } }))
        : unwrap(api.POST("/api/v1/jobs/{id}/cancel", { params: { path: { id: String(job.id) } } })),
    onSettled: () => void client.invalidateQueries({ queryKey: ["jobs"] }),
  });
  const manage = can(me, "jobs:manage");
  return (
    <section>
      <h1>Jobs</h1>
      <div className="filters">
        <SelectField label="State" value={state} onChange={(e) => setState(e.target.value as Job["state"] | "")}>
          <option value="">Any state</option>
          {["queued", "running", "succeeded", "dead", "cancelled"].map((value) => (
            <option key={value} value={value}>
              {value}
            </option>
          ))}
        </SelectField>
      </div>
      <ProblemAlert error={list.error ?? act.error} />
      <DataTable
        caption="Jobs"
        {...list.table}
        rowKey={(j) => j.id}
        columns={[
          { header: "Id", className: "num", cell: (j) => j.id },
          { header: "Kind", cell: (j) => <code>{j.kind}</code> },
          { header: "State", cell: (j) => <Badge value={j.state} /> },
          { header: "Attempts", className: "num", cell: (j) => `${j.attempts}/${j.max_attempts}` },
          { header: "Resource", cell: (j) => <JobResource job={j} /> },
          { header: "Updated", cell: (j) => when(j.updated_at) },
          { header: "Last error", cell: (j) => (j.last_error ? <span className="error-text">{j.last_error}</span> : "—") },
          {
            header: "Actions",
            cell: (j) =>
              manage && j.state === "dead" ? (
                <button type="button" className="secondary outline small" onClick={() => act.mutate({ job: j, action: "retry" })}>
                  Retry
                </button>
              ) : manage && j.state === "queued" ? (
                <button type="button" className="secondary outline small" onClick={() => act.mutate({ job: j, action: "cancel" })}>
                  Cancel
                </button>
              ) : null,
          },
        ]}
      />
    </section>
  );
}
