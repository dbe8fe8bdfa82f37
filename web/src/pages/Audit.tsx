/** The audit log, newest first, with filters. */
import { useState } from "react";
import { unwrap } from "../api/client";
import { pageSize, useCursorList } from "../api/lists";
import { Badge } from "../components/Badge";
import { DataTable } from "../components/DataTable";
import { SelectField, TextField } from "../components/Field";
import { ProblemAlert } from "../components/Problem";
import { when } from "../format";
import { useSession } from "../session";

type Outcome = "success" | "denied" | "failure";

export function AuditPage() {
  const { api } = useSession();
  const [filters, setFilters] = useState({ action: "", actor: "", resource_type: "", outcome: "" });
  const query = {
    action: filters.action || undefined,
    actor: filters.actor || undefined,
    resource_type: filters.resource_type || undefined,
    outcome: (filters.outcome || undefined) as Outcome | undefined,
  };
  const list = useCursorList(["audit", query], (cursor) =>
    unwrap(api.GET("/api/v1/audit-events", { params: { query: { limit: pageSize(cursor), cursor, ...query } } })),
  );
  const set = (key: keyof typeof filters) => (event: { target: { value: string } }) =>
    setFilters((current) => ({ ...current, [key]: event.target.value }));
  return (
    <section>
      <h1>Audit log</h1>
      <div className="filters grid">
        <TextField label="Action" value={filters.action} onChange={set("action")} placeholder="pool.create" />
        <TextField label="Actor" value={filters.actor} onChange={set("actor")} />
        <TextField label="Resource type" value={filters.resource_type} onChange={set("resource_type")} placeholder="pools" />
        <SelectField label="Outcome" value={filters.outcome} onChange={set("outcome")}>
          <option value="">Any outcome</option>
          <option value="success">success</option>
          <option value="denied">denied</option>
          <option value="failure">failure</option>
        </SelectField>
      </div>
      <ProblemAlert error={list.error} />
      <DataTable
        caption="Audit events"
        {...list.table}
        rowKey={(e) => e.id}
        columns={[
          { header: "When", cell: (e) => when(e.occurred_at) },
          { header: "Action", cell: (e) => <code>{e.action}</code> },
          { header: "Outcome", cell: (e) => <Badge value={e.outcome} /> },
          { header: "Actor", cell: (e) => e.actor },
          { header: "Resource", cell: (e) => `${e.resource_type}${e.resource_id ? ` ${e.resource_id}` : ""}` },
          { header: "Details", cell: (e) => <code className="details">{JSON.stringify(e.details)}</code> },
        ]}
      />
    </section>
  );
}
