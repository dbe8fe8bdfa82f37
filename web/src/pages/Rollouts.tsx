/**
 * A pool's image rollouts: start one (a template of the pool's cluster and the strategy, each
 * field's default explained), follow the active one live (a progress bar and each desktop's
 * state), pause, resume or cancel it, and the pool's image history with "Roll back to this".
 */
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useState, type FormEvent } from "react";
import { useUnsavedWarning } from "../components/Unsaved";
import { Link, useParams } from "react-router";
import { unwrap, type Schemas } from "../api/client";
import { can } from "../auth/permissions";
import { Badge } from "../components/Badge";
import { actorWords } from "../components/Names";
import { SelectField, TextField } from "../components/Field";
import { fieldErrorsOf, ProblemAlert } from "../components/Problem";
import { when, words } from "../format";
import { useSession } from "../session";

type Pool = Schemas["Pool"];
type Rollout = Schemas["Rollout"];
type RolloutCreate = Schemas["RolloutCreate"];

export const ACTIVE = new Set(["scheduled", "canary", "rolling", "paused"]);

interface Draft {
  template: string;
  canary: string;
  batch_size: string;
  min_ready: string;
  surge: string;
  in_use: "wait_for_logoff" | "force_logoff";
  warning_seconds: string;
  message: string;
  start_at: string;
  stop_on_error: boolean;
  recreate_assigned: boolean;
}

const EMPTY: Draft = {
  template: "",
  canary: "1",
  batch_size: "1",
  min_ready: "",
  surge: "0",
  in_use: "wait_for_logoff",
  warning_seconds: "300",
  message: "",
  start_at: "",
  stop_on_error: true,
  recreate_assigned: false,
};

/** The request body of a draft: blank optional fields are left to the API's defaults. */
export function bodyOf(draft: Draft): RolloutCreate {
  const body: RolloutCreate = {
    template: draft.template,
    canary: Number(draft.canary),
    batch_size: Number(draft.batch_size),
    surge: Number(draft.surge),
    in_use: draft.in_use,
    warning_seconds: Number(draft.warning_seconds),
    message: draft.message,
    stop_on_error: draft.stop_on_error,
    recreate_assigned: draft.recreate_assigned,
  };
  if (draft.min_ready.trim() !== "") body.min_ready = Number(draft.min_ready);
  if (draft.start_at) body.start_at = new Date(draft.start_at).toISOString();
  return body;
}

/** The templates of the pool's cluster (one query the page shares) and how each is named. */
function useTemplates(pool: Pool) {
  const { api, me } = useSession();
  const templates = useQuery({
    queryKey: ["clusters", pool.cluster_id, "templates"],
    enabled: can(me, "clusters:read"),
    queryFn: () =>
      unwrap(
        api.GET("/api/v1/clusters/{cluster_id}/templates", {
          params: { path: { cluster_id: pool.cluster_id }, query: { limit: 500 } },
        }),
      ),
  });
  const items = templates.data?.items ?? [];
  /** A template's name (its id when the cluster no longer lists it). */
  const nameOf = (id: string) => items.find((item) => item.id === id)?.name ?? id;
  return { templates, items, nameOf };
}

/** Whether a template may run a pool of `os`: its OS is the pool's, or unknown. */
export function fitsPool(template: { os_type?: string | null }, os: string): boolean {
  return !template.os_type || template.os_type === "unknown" || template.os_type === os;
}

function StartForm({
  pool,
  template,
  onStarted,
  onCancel,
}: {
  pool: Pool;
  template: string;
  onStarted: () => void;
  onCancel: () => void;
}) {
  const { api } = useSession();
  const client = useQueryClient();
  const [draft, setDraft] = useState<Draft>({ ...EMPTY, template });
  const { templates, items, nameOf } = useTemplates(pool);
  const offered = items.filter((item) => fitsPool(item, pool.os_type));
  const otherOs = items.length - offered.length;
  const start = useMutation({
    mutationFn: (body: RolloutCreate) =>
      unwrap(api.POST("/api/v1/pools/{pool_id}/rollouts", { params: { path: { pool_id: pool.id } }, body })),
    onSuccess: () => {
      void client.invalidateQueries({ queryKey: ["rollouts", pool.id] });
      onStarted();
    },
  });
  useUnsavedWarning(!start.isSuccess && JSON.stringify(draft) !== JSON.stringify({ ...EMPTY, template }));
  const fieldErrors = fieldErrorsOf(start.error);
  // The API marks a template of the wrong OS at the pool's OS: here it is the template's fault.
  const errors: Record<string, string | undefined> = {
    ...fieldErrors,
    template: fieldErrors.template ?? fieldErrors.os_type,
  };
  const set =
    (name: keyof Draft) =>
    (event: { target: { value: string } }) =>
      setDraft((current) => ({ ...current, [name]: event.target.value }));
  const submit = (event: FormEvent) => {
    event.preventDefault();
    if (
      draft.recreate_assigned &&
      !window.confirm("Rebuild the desktops assigned to users? Their data on those desktops is destroyed.")
    )
      return;
    start.mutate(bodyOf(draft));
  };
  return (
    <form onSubmit={submit} noValidate aria-label="Start a rollout">
      <ProblemAlert error={start.error} />
      <SelectField
        label="New template"
        value={draft.template}
        onChange={set("template")}
        error={errors.template}
        hint={
          `The pool runs ${nameOf(pool.template)} now.` +
          (otherOs ? ` Templates of another OS than ${pool.os_type} are not offered (${otherOs}).` : "")
        }
      >
        <option value="">Choose a template</option>
        {offered.map((item) => (
          <option key={`${item.node}/${item.id}`} value={item.id} disabled={item.id === pool.template}>
            {item.name} ({item.os_type}, {item.node})
          </option>
        ))}
        {draft.template && !offered.some((item) => item.id === draft.template) ? (
          <option value={draft.template}>{nameOf(draft.template)}</option>
        ) : null}
      </SelectField>
      <div className="grid">
        <TextField
          label="Canary"
          type="number"
          min={0}
          value={draft.canary}
          onChange={set("canary")}
          error={errors.canary}
          hint="Desktops replaced first (default 1). Nothing else is touched until they are ready."
        />
        <TextField
          label="Batch size"
          type="number"
          min={1}
          value={draft.batch_size}
          onChange={set("batch_size")}
          error={errors.batch_size}
          hint="Desktops replaced at once after the canary (default 1)."
        />
        <TextField
          label="Minimum ready"
          type="number"
          min={0}
          value={draft.min_ready}
          onChange={set("min_ready")}
          error={errors.min_ready}
          hint={`Ready, free desktops kept during the rollout (blank: the pool's spare, ${pool.spare}).`}
        />
        <TextField
          label="Surge"
          type="number"
          min={0}
          value={draft.surge}
          onChange={set("surge")}
          error={errors.surge}
          hint={`Extra desktops allowed above max_size ${pool.max_size} (default 0).`}
        />
      </div>
      <div className="grid">
        <SelectField
          label="Desktops in use"
          value={draft.in_use}
          onChange={set("in_use")}
          error={errors.in_use}
          hint="Wait for the user to log off (default), or warn them and log them off."
        >
          <option value="wait_for_logoff">Wait for the user to log off</option>
          <option value="force_logoff">Warn the user, then log them off</option>
        </SelectField>
        <TextField
          label="Warning (seconds)"
          type="number"
          min={0}
          value={draft.warning_seconds}
          onChange={set("warning_seconds")}
          error={errors.warning_seconds}
          hint="How long users have between the warning and the log-off (default 300)."
          disabled={draft.in_use !== "force_logoff"}
        />
        <TextField
          label="Start at"
          type="datetime-local"
          value={draft.start_at}
          onChange={set("start_at")}
          error={errors.start_at}
          hint="Blank: now."
        />
      </div>
      <TextField
        label="Message to users"
        value={draft.message}
        onChange={set("message")}
        error={errors.message}
        hint="Shown to the user of a desktop to be replaced, with the countdown."
      />
      <label>
        <input
          type="checkbox"
          role="switch"
          checked={draft.stop_on_error}
          onChange={(event) => setDraft((current) => ({ ...current, stop_on_error: event.target.checked }))}
        />
        Stop on the first failed desktop (default on): the pool keeps serving its current template
      </label>
      {pool.kind === "persistent" ? (
        <label className="danger">
          <input
            type="checkbox"
            checked={draft.recreate_assigned}
            onChange={(event) => setDraft((current) => ({ ...current, recreate_assigned: event.target.checked }))}
          />
          Also rebuild desktops assigned to users: <strong>this destroys those users' data</strong> (default off: they
          keep their disks)
        </label>
      ) : null}
      <div className="toolbar">
        <button type="submit" aria-busy={start.isPending}>
          Start the rollout
        </button>
        <button type="button" className="secondary" onClick={onCancel}>
          Cancel
        </button>
      </div>
      {templates.error ? <ProblemAlert error={templates.error} /> : null}
    </form>
  );
}

function Progress({ rollout, nameOf }: { rollout: Rollout; nameOf: (id: string) => string }) {
  const { counts } = rollout;
  return (
    <div className="rollout-progress">
      <progress value={counts.percent} max={100} aria-label="Rollout progress" />
      <span data-testid="rollout-percent">{counts.percent} %</span>{" "}
      <span className="meta">
        {counts.on_new_template} of {counts.total} on {nameOf(rollout.to_template)} · {counts.replacing} being replaced ·{" "}
        {counts.waiting_for_logoff} waiting for a log-off · {counts.failed} failed
      </span>
    </div>
  );
}

function RolloutView({ pool, rollout }: { pool: Pool; rollout: Rollout }) {
  const { api, me } = useSession();
  const client = useQueryClient();
  const act = useMutation({
    mutationFn: (verb: "pause" | "resume" | "cancel") => {
      const path = { pool_id: pool.id, rollout_id: rollout.id };
      if (verb === "pause") return unwrap(api.POST("/api/v1/pools/{pool_id}/rollouts/{rollout_id}/pause", { params: { path } }));
      if (verb === "resume")
        return unwrap(api.POST("/api/v1/pools/{pool_id}/rollouts/{rollout_id}/resume", { params: { path } }));
      return unwrap(api.POST("/api/v1/pools/{pool_id}/rollouts/{rollout_id}/cancel", { params: { path } }));
    },
    onSuccess: () => void client.invalidateQueries({ queryKey: ["rollouts", pool.id] }),
  });
  const manage = can(me, "pools:manage");
  const { nameOf } = useTemplates(pool);
  return (
    <article aria-label={`Rollout to ${nameOf(rollout.to_template)}`} data-testid="rollout">
      <header className="page-head">
        <strong>
          {nameOf(rollout.from_template)} → {nameOf(rollout.to_template)}
        </strong>
        <Badge value={rollout.state} />
      </header>
      {rollout.reason ? <p data-testid="rollout-reason">{rollout.reason}</p> : null}
      {rollout.waiting_for ? (
        <p data-testid="rollout-waiting" role="status">
          Waiting for {rollout.waiting_for}.
        </p>
      ) : null}
      <Progress rollout={rollout} nameOf={nameOf} />
      <p className="meta">
        canary {rollout.canary} · batches of {rollout.batch_size} · at least {rollout.min_ready} ready · surge{" "}
        {rollout.surge} · {words(rollout.in_use)}
        {rollout.in_use === "force_logoff" ? ` after ${rollout.warning_seconds}s` : ""} · started{" "}
        {when(rollout.started_at)} by <span title={`Actor ${rollout.created_by}`}>{actorWords(rollout.created_by, rollout.created_by_name)}</span>
      </p>
      <ProblemAlert error={act.error} />
      {manage && ACTIVE.has(rollout.state) ? (
        <div className="toolbar" role="group" aria-label="Rollout actions">
          {rollout.state === "paused" ? (
            <button type="button" className="secondary" onClick={() => act.mutate("resume")}>
              Resume
            </button>
          ) : (
            <button type="button" className="secondary" onClick={() => act.mutate("pause")}>
              Pause
            </button>
          )}
          <button
            type="button"
            className="contrast outline"
            onClick={() => window.confirm("Cancel the rollout? Desktops already replaced stay.") && act.mutate("cancel")}
          >
            Cancel
          </button>
        </div>
      ) : null}
      {rollout.desktops.length ? (
        <table aria-label="Desktops of the rollout">
          <thead>
            <tr>
              <th>Desktop</th>
              <th>Role</th>
              <th>State</th>
              <th>Logged off at</th>
              <th>Error</th>
            </tr>
          </thead>
          <tbody>
            {rollout.desktops.map((desktop) => (
              <tr key={desktop.desktop_id}>
                <td>{desktop.name}</td>
                <td>{desktop.role}</td>
                <td>
                  <Badge value={desktop.state} />
                </td>
                <td>{desktop.logoff_at ? when(desktop.logoff_at) : ""}</td>
                <td>{desktop.error ?? ""}</td>
              </tr>
            ))}
          </tbody>
        </table>
      ) : null}
    </article>
  );
}

function ImageHistory({ pool, onRollBack }: { pool: Pool; onRollBack: (template: string) => void }) {
  const { api, me } = useSession();
  const images = useQuery({
    queryKey: ["rollouts", pool.id, "images"],
    queryFn: () => unwrap(api.GET("/api/v1/pools/{pool_id}/images", { params: { path: { pool_id: pool.id } } })),
  });
  const manage = can(me, "pools:manage");
  const { nameOf } = useTemplates(pool);
  return (
    <section aria-labelledby="images-title">
      <h2 id="images-title">Image history</h2>
      <ProblemAlert error={images.error} />
      <table aria-label="Image history">
        <thead>
          <tr>
            <th>Template</th>
            <th>Since</th>
            <th>How</th>
            <th>By</th>
            <th />
          </tr>
        </thead>
        <tbody>
          {images.data?.items.map((image, index) => (
            <tr key={`${image.template}-${image.since}-${index}`}>
              <td title={`Template id ${image.template}`}>{nameOf(image.template)}</td>
              <td>{when(image.since)}</td>
              <td>{image.how}</td>
              <td title={`Actor ${image.set_by}`}>{actorWords(image.set_by, image.set_by_name)}</td>
              <td>
                {manage && image.template !== pool.template ? (
                  <button type="button" className="secondary outline small" onClick={() => onRollBack(image.template)}>
                    Roll back to this
                  </button>
                ) : null}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </section>
  );
}

/** The pool's template and its desktops by template, by name. */
function PoolTemplates({ pool }: { pool: Pool }) {
  const { nameOf } = useTemplates(pool);
  const byTemplate = Object.entries(pool.counts.by_template);
  return (
    <p className="meta">
      Template {nameOf(pool.template)}
      {byTemplate.length ? " · desktops by template: " : ""}
      {byTemplate.map(([template, count]) => `${nameOf(template)} ${count}`).join(", ")}
    </p>
  );
}

export function RolloutsPage() {
  const { poolId = "" } = useParams();
  const { api, me } = useSession();
  const [starting, setStarting] = useState<string | null>(null);
  const pool = useQuery({
    queryKey: ["pool", poolId],
    queryFn: () => unwrap(api.GET("/api/v1/pools/{pool_id}", { params: { path: { pool_id: poolId } } })),
  });
  const rollouts = useQuery({
    queryKey: ["rollouts", poolId],
    queryFn: () =>
      unwrap(api.GET("/api/v1/pools/{pool_id}/rollouts", { params: { path: { pool_id: poolId }, query: { limit: 20 } } })),
  });
  if (pool.error) return <ProblemAlert error={pool.error} />;
  if (!pool.data) return <p aria-busy="true">Loading…</p>;
  const data = pool.data;
  const items = rollouts.data?.items ?? [];
  const active = items.find((item) => ACTIVE.has(item.state));
  const manage = can(me, "pools:manage");

  return (
    <section>
      <div className="page-head">
        <h1>Rollouts of {data.name}</h1>
        <Link to={`/pools/${data.id}`}>Back to the pool</Link>
      </div>
      <PoolTemplates pool={data} />
      <ProblemAlert error={rollouts.error} />
      {active ? <RolloutView pool={data} rollout={active} /> : null}
      {manage && !active ? (
        starting !== null ? (
          <StartForm
            key={starting}
            pool={data}
            template={starting}
            onStarted={() => setStarting(null)}
            onCancel={() => setStarting(null)}
          />
        ) : (
          <button type="button" onClick={() => setStarting("")}>
            Start a rollout
          </button>
        )
      ) : null}
      <ImageHistory
        pool={data}
        onRollBack={(template) => {
          setStarting(template);
          window.scrollTo({ top: 0 });
        }}
      />
      <h2>Past rollouts</h2>
      {items
        .filter((item) => item !== active)
        .map((item) => (
          <RolloutView key={item.id} pool={data} rollout={item} />
        ))}
      {rollouts.data && !items.length ? <p>No rollout yet.</p> : null}
    </section>
  );
}
