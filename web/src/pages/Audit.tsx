/** The audit log, newest first, with filters: who did what to which resource, in words. */
import { useState, type ReactNode } from "react";
import { unwrap, type Schemas } from "../api/client";
import { pageSize, useCursorList } from "../api/lists";
import { Badge } from "../components/Badge";
import { DataTable } from "../components/DataTable";
import { SelectField, TextField } from "../components/Field";
import { actorWords } from "../components/Names";
import { ProblemAlert } from "../components/Problem";
import { when, words } from "../format";
import { useSession } from "../session";

type Outcome = "success" | "denied" | "failure";
type AuditEvent = Schemas["AuditEvent"];

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** A value of an event's details in words: ids replaced by the names the API gave. */
export function detailValue(value: unknown, names: Record<string, string>): ReactNode {
  if (value === null || value === undefined) return "—";
  if (typeof value === "string") {
    if (UUID.test(value)) {
      const name = names[value.toLowerCase()];
      return <span title={`Id ${value}`}>{name ?? "a deleted or unnamed item"}</span>;
    }
    return value;
  }
  if (typeof value === "boolean") return value ? "yes" : "no";
  if (typeof value === "number") return String(value);
  if (Array.isArray(value)) {
    if (!value.length) return "none";
    return value.map((item, index) => (
      <span key={index}>
        {index ? ", " : ""}
        {detailValue(item, names)}
      </span>
    ));
  }
  if (typeof value === "object") {
    return <Details details={value as Record<string, unknown>} names={names} />;
  }
  return String(value);
}

function Details({ details, names }: { details: Record<string, unknown>; names: Record<string, string> }) {
  const entries = Object.entries(details);
  if (!entries.length) return <>—</>;
  return (
    <dl className="audit-details">
      {entries.map(([key, value]) => (
        <div key={key}>
          <dt>{words(key)}</dt>
          <dd>{detailValue(value, names)}</dd>
        </div>
      ))}
    </dl>
  );
}

/** "pool names-pool", "user Desk User", "session", with the id on hover. */
function Resource({ event }: { event: AuditEvent }) {
  const kind = event.resource_type.replace(/s$/, "");
  if (!event.resource_id) return <>{words(kind)}</>;
  const name = event.resource_name ?? (UUID.test(event.resource_id) ? null : event.resource_id);
  return (
    <span title={`${words(kind)} id ${event.resource_id}`}>
      {words(kind)} {name ?? "(deleted or unnamed)"}
    </span>
  );
}

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
      <div className="filters">
        <TextField label="Action" value={filters.action} onChange={set("action")} placeholder="pool.create" />
        <TextField label="Actor" value={filters.actor} onChange={set("actor")} placeholder="Name, email or id" />
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
        rowHeight={64}
        columns={[
          { header: "When", cell: (e) => when(e.occurred_at) },
          { header: "Action", cell: (e) => <code>{e.action}</code> },
          { header: "Outcome", cell: (e) => <Badge value={e.outcome} /> },
          {
            header: "Actor",
            cell: (e) => (
              <span title={`Actor ${e.actor}`}>
                {actorWords(e.actor, e.actor_name)}
                {e.actor_email && e.actor_email !== e.actor_name ? <small className="meta"> {e.actor_email}</small> : null}
              </span>
            ),
          },
          { header: "Resource", cell: (e) => <Resource event={e} /> },
          { header: "Details", className: "wrap", cell: (e) => <Details details={e.details} names={e.names} /> },
        ]}
      />
    </section>
  );
}
