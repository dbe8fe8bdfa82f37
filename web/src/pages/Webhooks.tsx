/**
 * Webhooks: where audit events are delivered, whether deliveries fail, and a form to add one
 * (its signing secret shown once); the API's refusals in words at their fields.
 */
import { useMutation, useQueryClient } from "@tanstack/react-query";
import { useState, type FormEvent } from "react";
import { unwrap, type Schemas } from "../api/client";
import { pageSize, useCursorList } from "../api/lists";
import { can } from "../auth/permissions";
import { DataTable } from "../components/DataTable";
import { TextField } from "../components/Field";
import { fieldErrorsOf, ProblemAlert } from "../components/Problem";
import { when } from "../format";
import { useSession } from "../session";

type Webhook = Schemas["Webhook"];

/** "pool.*, session.open" → ["pool.*", "session.open"]. */
export function eventTypes(text: string): string[] {
  return text
    .split(/[\s,]+/)
    .map((value) => value.trim())
    .filter(Boolean);
}

/** The field errors of a webhook's form: an event type's own error is the list's. */
export function webhookErrors(error: unknown): Record<string, string> {
  const errors = fieldErrorsOf(error);
  for (const [key, detail] of Object.entries(errors)) {
    if (key.startsWith("event_types.")) {
      errors.event_types = errors.event_types ? `${errors.event_types} ${detail}` : detail;
    }
  }
  return errors;
}

function state(webhook: Webhook): string {
  if (!webhook.enabled) return webhook.disabled_reason ? `Off: ${webhook.disabled_reason}` : "Off";
  return webhook.failing_since ? `Failing since ${when(webhook.failing_since)}` : "Delivering";
}

function AddWebhook() {
  const { api } = useSession();
  const client = useQueryClient();
  const [draft, setDraft] = useState({ name: "", url: "", events: "" });
  const add = useMutation({
    mutationFn: () =>
      unwrap(
        api.POST("/api/v1/webhooks", {
          body: { name: draft.name.trim(), url: draft.url.trim(), event_types: eventTypes(draft.events) },
        }),
      ),
    onSuccess: () => {
      setDraft({ name: "", url: "", events: "" });
      void client.invalidateQueries({ queryKey: ["webhooks"] });
    },
  });
  const errors = webhookErrors(add.error);
  const submit = (event: FormEvent) => {
    event.preventDefault();
    add.mutate();
  };
  return (
    <form onSubmit={submit} noValidate aria-label="New webhook">
      <ProblemAlert error={add.error} />
      <div className="grid">
        <TextField label="Name" value={draft.name} onChange={(e) => setDraft({ ...draft, name: e.target.value })} error={errors.name} />
        <TextField
          label="Receiver URL"
          value={draft.url}
          onChange={(e) => setDraft({ ...draft, url: e.target.value })}
          error={errors.url}
          hint="http or https; redirects are not followed."
        />
      </div>
      <TextField
        label="Event types"
        value={draft.events}
        onChange={(e) => setDraft({ ...draft, events: e.target.value })}
        error={errors.event_types}
        hint="Separated by commas: a named type (session.started), audit.<action> (audit.pool.create), a prefix wildcard (session.*, audit.pool.*) or * for every event."
      />
      <button type="submit" aria-busy={add.isPending}>
        Add the webhook
      </button>
      {add.data ? (
        <p role="status" data-testid="webhook-secret">
          Added {add.data.name}. Its signing secret, shown only now (store it with the receiver): <code>{add.data.secret}</code>
        </p>
      ) : null}
    </form>
  );
}

export function WebhooksPage() {
  const { api, me } = useSession();
  const list = useCursorList(["webhooks"], (cursor) =>
    unwrap(api.GET("/api/v1/webhooks", { params: { query: { limit: pageSize(cursor), cursor } } })),
  );
  return (
    <section>
      <h1>Webhooks</h1>
      <p className="meta">Audit events are sent, signed, to each receiver in order; a failing one is retried.</p>
      {can(me, "webhooks:manage") ? (
        <details>
          <summary>Add a webhook</summary>
          <AddWebhook />
        </details>
      ) : null}
      <ProblemAlert error={list.error} />
      <DataTable
        caption="Webhooks"
        columns={[
          { header: "Name", cell: (w) => w.name },
          { header: "Receiver", className: "wrap", cell: (w) => <code>{w.url}</code> },
          { header: "Events", className: "wrap", cell: (w) => w.event_types.join(", ") },
          { header: "State", cell: state },
          { header: "Added", cell: (w) => when(w.created_at) },
        ]}
        {...list.table}
        rowKey={(w) => w.id}
        empty="No webhook."
      />
    </section>
  );
}
