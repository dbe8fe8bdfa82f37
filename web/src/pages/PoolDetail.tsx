/** One pool: its health and counts, desktops (live), entitlements, settings, drain and delete. */
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useUnsavedDraft } from "../components/Unsaved";
import { useState, type FormEvent } from "react";
import { Link, useNavigate, useParams } from "react-router";
import { unwrap, type Schemas } from "../api/client";
import { can } from "../auth/permissions";
import { Badge } from "../components/Badge";
import { useConfirm, type Question } from "../components/Confirm";
import { DesktopTable } from "../components/DesktopTable";
import { SelectField } from "../components/Field";
import { LogonPhases } from "../components/LogonPhases";
import { PoolCapacity } from "../components/PoolCapacity";
import { PoolRollout } from "../components/PoolRollout";
import { SessionPolicySummary } from "../components/SessionPolicySummary";
import { fieldErrorsOf, ProblemAlert } from "../components/Problem";
import { when, words } from "../format";
import { useSession } from "../session";
import { PoolForm } from "./PoolForm";

type Pool = Schemas["Pool"];

/** Why the pool's reconciliation fails, and since when: the other pools are not affected. */
function ReconcileError({ pool }: { pool: Pool }) {
  const failing = pool.reconcile_error;
  if (!failing) return null;
  return (
    <div className="reconcile-error" role="alert" data-testid="reconcile-error">
      <strong>Reconciliation of this pool is failing</strong> since {when(failing.since)}: {failing.reason}.{" "}
      Its desktops are kept as they are and other pools are not affected; the next pass tries again ({words(failing.code)}).
    </div>
  );
}

function Counts({ pool }: { pool: Pool }) {
  const entries = Object.entries(pool.counts.by_state).filter(([, count]) => count > 0);
  return (
    <dl className="counts" aria-label="Desktops by state">
      <div>
        <dt>Total</dt>
        <dd data-testid="count-total">{pool.counts.total}</dd>
      </div>
      {entries.map(([state, count]) => (
        <div key={state}>
          <dt>{words(state)}</dt>
          <dd data-testid={`count-${state}`}>{count}</dd>
        </div>
      ))}
      <div>
        <dt>Available</dt>
        <dd>{pool.counts.available}</dd>
      </div>
      {Object.entries(pool.counts.by_template).map(([template, count]) => (
        <div key={`template-${template}`}>
          <dt>On template {template}</dt>
          <dd data-testid={`count-template-${template}`}>{count}</dd>
        </div>
      ))}
    </dl>
  );
}

function Entitlements({ pool }: { pool: Pool }) {
  const { api, me } = useSession();
  const client = useQueryClient();
  const [subject, setSubject] = useState("");
  useUnsavedDraft(subject);
  const key = ["pool", pool.id, "entitlements"];
  const entitlements = useQuery({
    queryKey: key,
    queryFn: () =>
      unwrap(api.GET("/api/v1/pools/{pool_id}/entitlements", { params: { path: { pool_id: pool.id }, query: { limit: 500 } } })),
  });
  const groups = useQuery({
    queryKey: ["groups", "list"],
    enabled: can(me, "groups:read"),
    queryFn: () => unwrap(api.GET("/api/v1/groups", { params: { query: { limit: 500 } } })),
  });
  const users = useQuery({
    queryKey: ["users", "all"],
    enabled: can(me, "users:read"),
    queryFn: () => unwrap(api.GET("/api/v1/users", { params: { query: { limit: 500 } } })),
  });
  const names = new Map<string, string>();
  groups.data?.items.forEach((group) => names.set(`group:${group.id}`, `group ${group.name}`));
  users.data?.items.forEach((user) => names.set(`user:${user.id}`, `user ${user.display_name || user.email || user.subject}`));
  const add = useMutation({
    mutationFn: (value: string) => {
      const [subject_type, subject_id] = value.split(":") as ["user" | "group", string];
      return unwrap(
        api.POST("/api/v1/pools/{pool_id}/entitlements", {
          params: { path: { pool_id: pool.id } },
          body: { subject_type, subject_id },
        }),
      );
    },
    onSuccess: () => {
      setSubject("");
      void client.invalidateQueries({ queryKey: key });
    },
  });
  const remove = useMutation({
    mutationFn: (entitlement: Schemas["Entitlement"]) =>
      unwrap(
        api.DELETE("/api/v1/pools/{pool_id}/entitlements/{subject_type}/{subject_id}", {
          params: {
            path: { pool_id: pool.id, subject_type: entitlement.subject_type, subject_id: entitlement.subject_id },
          },
        }),
      ),
    onSuccess: () => void client.invalidateQueries({ queryKey: key }),
  });
  const manage = can(me, "pools:manage");
  const submit = (event: FormEvent) => {
    event.preventDefault();
    if (subject) add.mutate(subject);
  };
  return (
    <section aria-labelledby="entitlements-title">
      <h2 id="entitlements-title">Entitlements</h2>
      <ProblemAlert error={entitlements.error ?? add.error ?? remove.error} />
      <ul>
        {entitlements.data?.items.map((entitlement) => {
          const id = `${entitlement.subject_type}:${entitlement.subject_id}`;
          return (
            <li key={id}>
              {names.get(id) ?? id}{" "}
              {manage ? (
                <button type="button" className="secondary outline small" onClick={() => remove.mutate(entitlement)}>
                  Revoke
                </button>
              ) : null}
            </li>
          );
        })}
        {entitlements.data && !entitlements.data.items.length ? <li>Nobody may open this pool yet.</li> : null}
      </ul>
      {manage ? (
        <form onSubmit={submit} className="inline-form" aria-label="Entitle">
          <SelectField
            label="Entitle a group or user"
            value={subject}
            onChange={(event) => setSubject(event.target.value)}
            error={fieldErrorsOf(add.error).subject_id}
          >
            <option value="">Choose…</option>
            {groups.data?.items.map((group) => (
              <option key={group.id} value={`group:${group.id}`}>
                group {group.name}
              </option>
            ))}
            {users.data?.items.map((user) => (
              <option key={user.id} value={`user:${user.id}`}>
                user {user.display_name || user.email || user.subject}
              </option>
            ))}
          </SelectField>
          <button type="submit">Entitle</button>
        </form>
      ) : null}
    </section>
  );
}

/**
 * The question before deleting a pool: refused up front while it still has desktops (as the API
 * would refuse it), offering to set it to draining (`drain`) when it is not yet.
 */
export function deleteQuestion(pool: Pick<Pool, "name" | "state" | "counts">, drain?: () => void): Question {
  const left = pool.counts.total;
  const desktops = `${left} desktop${left === 1 ? "" : "s"}`;
  const refusal = !left
    ? undefined
    : pool.state === "draining"
      ? `The pool is draining: ${desktops} ${left === 1 ? "is" : "are"} still to be deleted (each once its user is done). Delete the pool when none is left.`
      : `Set it to draining first: the pool still has ${desktops}, and a pool is deleted only once it has none. Draining deletes its desktops as their users are done; then delete the pool.`;
  return {
    title: `Delete the pool ${pool.name}?`,
    body: <p>The pool, its entitlements and its settings are deleted. Its history stays in the audit log.</p>,
    confirm: `Delete ${pool.name}`,
    refusal,
    offer: left && pool.state !== "draining" && drain ? { label: "Set it to draining", run: drain } : undefined,
  };
}

export function PoolDetailPage() {
  const { poolId = "" } = useParams();
  const { api, me } = useSession();
  const client = useQueryClient();
  const navigate = useNavigate();
  const [editing, setEditing] = useState(false);
  const pool = useQuery({
    queryKey: ["pool", poolId],
    queryFn: () => unwrap(api.GET("/api/v1/pools/{pool_id}", { params: { path: { pool_id: poolId } } })),
  });
  const change = useMutation({
    mutationFn: (state: Pool["state"]) =>
      unwrap(api.PATCH("/api/v1/pools/{pool_id}", { params: { path: { pool_id: poolId } }, body: { state } })),
    onSuccess: () => void client.invalidateQueries({ queryKey: ["pool", poolId] }),
  });
  const reconcile = useMutation({
    mutationFn: () => unwrap(api.POST("/api/v1/pools/{pool_id}/reconcile", { params: { path: { pool_id: poolId } } })),
  });
  const remove = useMutation({
    mutationFn: () => unwrap(api.DELETE("/api/v1/pools/{pool_id}", { params: { path: { pool_id: poolId } } })),
    onSuccess: () => {
      void client.invalidateQueries({ queryKey: ["pools"] });
      navigate("/pools");
    },
  });
  const [dialog, ask] = useConfirm();
  if (pool.error) return <ProblemAlert error={pool.error} />;
  if (!pool.data) return <p aria-busy="true">Loading…</p>;
  const data = pool.data;
  const manage = can(me, "pools:manage");
  return (
    <section>
      <div className="page-head">
        <h1>Pool {data.name}</h1>
        <Badge value={data.state} />
        <Badge value={data.health?.status ?? "unknown"} />
      </div>
      <ReconcileError pool={data} />
      <p>{data.description}</p>
      {data.health?.reasons.length ? (
        <ul className="reasons">
          {data.health.reasons.map((reason) => (
            <li key={reason}>{reason}</li>
          ))}
        </ul>
      ) : null}
      <Counts pool={data} />
      <PoolRollout poolId={data.id} />
      <SessionPolicySummary policy={data.session_policy} />
      <p className="meta">
        {words(data.kind)} · {data.os_type} · template {data.template} · {data.min_size}–{data.max_size}, {data.spare}{" "}
        spare · reconciled {when(data.reconciled_at)} · <Link to={`/pools/${data.id}/rollouts`}>Rollouts and image history</Link>
      </p>
      <ProblemAlert error={change.error ?? reconcile.error ?? remove.error} />
      {manage ? (
        <div className="toolbar" role="group" aria-label="Pool actions">
          <button type="button" className="secondary" onClick={() => setEditing((value) => !value)}>
            {editing ? "Close settings" : "Edit settings"}
          </button>
          {data.state !== "enabled" ? (
            <button type="button" className="secondary" onClick={() => change.mutate("enabled")}>
              Enable
            </button>
          ) : null}
          {data.state !== "disabled" ? (
            <button type="button" className="secondary" onClick={() => change.mutate("disabled")}>
              Disable
            </button>
          ) : null}
          {data.state !== "draining" ? (
            <button
              type="button"
              className="secondary"
              onClick={() => window.confirm("Drain: delete desktops as they become free?") && change.mutate("draining")}
            >
              Drain
            </button>
          ) : null}
          <button type="button" className="secondary" onClick={() => reconcile.mutate()}>
            Reconcile now
          </button>
          <button
            type="button"
            className="contrast outline"
            onClick={() => void ask(deleteQuestion(data, () => change.mutate("draining"))).then((yes) => yes && remove.mutate())}
          >
            Delete
          </button>
        </div>
      ) : null}
      {dialog}
      {editing ? <PoolForm pool={data} onSaved={() => setEditing(false)} /> : null}
      <PoolCapacity pool={data} />
      <h2>Desktops</h2>
      <DesktopTable poolId={data.id} showPool={false} />
      <Entitlements pool={data} />
      {can(me, "reports:read") ? <LogonPhases poolId={data.id} /> : null}
    </section>
  );
}
