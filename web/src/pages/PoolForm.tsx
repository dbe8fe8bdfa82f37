/**
 * Create or change a pool: cluster, template, kind, sizes, naming, placement (target nodes,
 * storage), session policy and domain join; the API's field errors next to their fields.
 */
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useState, type FormEvent } from "react";
import { useUnsavedWarning } from "../components/Unsaved";
import { useNavigate } from "react-router";
import { unwrap, type Schemas } from "../api/client";
import { allPages } from "../api/lists";
import { SelectField, TextField } from "../components/Field";
import { fieldErrorsOf, ProblemAlert } from "../components/Problem";
import { can } from "../auth/permissions";
import { useSession } from "../session";
import { clientBodyOf, clientDraftOf, ClientPolicyFields, type ClientDraft } from "./ClientPolicyFields";

type Pool = Schemas["Pool"];
type PoolCreate = Schemas["PoolCreate"];

export interface PoolDraft {
  name: string;
  description: string;
  cluster_id: string;
  template: string;
  kind: "non_persistent" | "persistent";
  os_type: "linux" | "windows";
  clone_mode: "linked" | "full";
  min_size: string;
  max_size: string;
  spare: string;
  /** The capacity schedule's id; empty: none. */
  schedule_id: string;
  naming_pattern: string;
  /** Nodes new desktops may go to; empty: any node. */
  target_nodes: string[];
  /** The storage of new desktops' disks; empty: the template's. */
  storage: string;
  domain: string;
  domain_username: string;
  domain_ou: string;
  domain_password: string;
  protocol: "auto" | "rdp" | "vnc";
  after_disconnect: "logoff_immediately" | "logoff_after_delay" | "never";
  logoff_delay: string;
  idle_timeout: string;
  max_session_duration: string;
  /** Session recording (docs/operators/recordings.md): on, and with the user's keystrokes. */
  recording: boolean;
  include_keys: boolean;
  /** The client policy (clipboard, files, sound, printing, watermark). */
  client: ClientDraft;
}

export function draftOf(pool?: Pool, clusterId = "", template = ""): PoolDraft {
  return {
    name: pool?.name ?? "",
    description: pool?.description ?? "",
    cluster_id: pool?.cluster_id ?? clusterId,
    template: pool?.template ?? template,
    kind: pool?.kind ?? "non_persistent",
    os_type: pool?.os_type ?? "linux",
    clone_mode: pool?.clone_mode ?? "linked",
    min_size: String(pool?.min_size ?? 1),
    max_size: String(pool?.max_size ?? 5),
    spare: String(pool?.spare ?? 1),
    schedule_id: pool?.schedule_id ?? "",
    naming_pattern: pool?.naming_pattern ?? "desk-{n:03}",
    target_nodes: [...(pool?.target_nodes ?? [])],
    storage: pool?.storage ?? "",
    domain: pool?.domain_join?.domain ?? "",
    domain_username: pool?.domain_join?.username ?? "",
    domain_ou: pool?.domain_join?.organizational_unit ?? "",
    domain_password: "",
    protocol: pool?.session_policy.protocol ?? "auto",
    after_disconnect: pool?.session_policy.after_disconnect ?? "logoff_after_delay",
    logoff_delay: String(pool?.session_policy.logoff_delay ?? 300),
    idle_timeout: pool?.session_policy.idle_timeout ? String(pool.session_policy.idle_timeout) : "",
    max_session_duration: pool?.session_policy.max_session_duration
      ? String(pool.session_policy.max_session_duration)
      : "",
    recording: pool?.session_policy.recording?.enabled ?? false,
    include_keys: pool?.session_policy.recording?.include_keys ?? false,
    client: clientDraftOf(pool?.session_policy.client),
  };
}

/** Seconds from a form field; empty means none. */
function seconds(value: string): number | null {
  return value.trim() ? Number(value) : null;
}

/**
 * The request body of a draft. The domain join only when a domain is given; when changing a
 * pool that has one, an empty domain removes it (null).
 */
export function bodyOf(draft: PoolDraft, pool?: Pool): PoolCreate {
  const body: PoolCreate = {
    name: draft.name.trim(),
    description: draft.description,
    cluster_id: draft.cluster_id,
    template: draft.template,
    kind: draft.kind,
    os_type: draft.os_type,
    clone_mode: draft.clone_mode,
    min_size: Number(draft.min_size),
    max_size: Number(draft.max_size),
    spare: Number(draft.spare),
    schedule_id: draft.schedule_id || null,
    naming_pattern: draft.naming_pattern,
    target_nodes: draft.target_nodes,
    storage: draft.storage.trim() || null,
    session_policy: {
      protocol: draft.protocol,
      after_disconnect: draft.after_disconnect,
      logoff_delay: Number(draft.logoff_delay || 0),
      idle_timeout: seconds(draft.idle_timeout),
      max_session_duration: seconds(draft.max_session_duration),
      recording: { enabled: draft.recording, include_keys: draft.recording && draft.include_keys },
      client: clientBodyOf(draft.client),
    },
  };
  if (draft.domain.trim()) {
    body.domain_join = {
      domain: draft.domain.trim(),
      username: draft.domain_username,
      organizational_unit: draft.domain_ou || null,
      ...(draft.domain_password ? { password: draft.domain_password } : {}),
    };
  } else if (pool?.domain_join) {
    body.domain_join = null;
  }
  return body;
}

export function PoolForm({
  pool,
  clusterId,
  template,
  onSaved,
  submitLabel,
}: {
  pool?: Pool;
  clusterId?: string;
  template?: string;
  onSaved?: (pool: Pool) => void;
  submitLabel?: string;
}) {
  const { api, me } = useSession();
  const client = useQueryClient();
  const navigate = useNavigate();
  const [initial] = useState<PoolDraft>(() => draftOf(pool, clusterId, template));
  const [draft, setDraft] = useState<PoolDraft>(initial);
  const schedules = useQuery({
    queryKey: ["schedules", "list"],
    enabled: can(me, "schedules:read"),
    queryFn: async () => ({
      items: await allPages((cursor, limit) => unwrap(api.GET("/api/v1/schedules", { params: { query: { limit, cursor } } }))),
    }),
  });
  const set = (field: keyof PoolDraft) => (event: { target: { value: string } }) =>
    setDraft((current) => ({ ...current, [field]: event.target.value }));
  const clusters = useQuery({
    queryKey: ["clusters", "list"],
    queryFn: () => unwrap(api.GET("/api/v1/clusters", { params: { query: { limit: 500 } } })),
  });
  const nodes = useQuery({
    queryKey: ["clusters", draft.cluster_id, "nodes"],
    enabled: Boolean(draft.cluster_id),
    queryFn: () =>
      unwrap(
        api.GET("/api/v1/clusters/{cluster_id}/nodes", {
          params: { path: { cluster_id: draft.cluster_id }, query: { limit: 500 } },
        }),
      ),
  });
  const toggleNode = (node: string) =>
    setDraft((current) => ({
      ...current,
      target_nodes: current.target_nodes.includes(node)
        ? current.target_nodes.filter((name) => name !== node)
        : [...current.target_nodes, node],
    }));
  const nodeNames = [
    ...(nodes.data?.items.map((node) => node.name) ?? []),
    ...draft.target_nodes.filter((name) => !nodes.data?.items.some((node) => node.name === name)),
  ];
  const templates = useQuery({
    queryKey: ["clusters", draft.cluster_id, "templates"],
    enabled: Boolean(draft.cluster_id),
    queryFn: () =>
      unwrap(
        api.GET("/api/v1/clusters/{cluster_id}/templates", {
          params: { path: { cluster_id: draft.cluster_id }, query: { limit: 500 } },
        }),
      ),
  });
  const save = useMutation({
    mutationFn: async (body: PoolCreate) =>
      pool
        ? unwrap(api.PATCH("/api/v1/pools/{pool_id}", { params: { path: { pool_id: pool.id } }, body }))
        : unwrap(api.POST("/api/v1/pools", { body })),
    onSuccess: (saved) => {
      void client.invalidateQueries({ queryKey: ["pools"] });
      void client.invalidateQueries({ queryKey: ["pool"] });
      if (onSaved) onSaved(saved);
      else navigate(`/pools/${saved.id}`);
    },
  });
  useUnsavedWarning(!save.isSuccess && JSON.stringify(draft) !== JSON.stringify(initial));
  const errors = fieldErrorsOf(save.error);
  // `/target_nodes` or one node's pointer (`/target_nodes/2`).
  const nodesError = Object.entries(errors)
    .filter(([name]) => name === "target_nodes" || name.startsWith("target_nodes."))
    .map(([, detail]) => detail)
    .join(" ");
  const submit = (event: FormEvent) => {
    event.preventDefault();
    save.mutate(bodyOf(draft, pool));
  };
  return (
    <form onSubmit={submit} noValidate aria-label={pool ? "Change the pool" : "New pool"}>
      <ProblemAlert error={save.error} />
      <div className="grid">
        <TextField label="Name" value={draft.name} onChange={set("name")} error={errors.name} required />
        <TextField
          label="Naming pattern"
          value={draft.naming_pattern}
          onChange={set("naming_pattern")}
          error={errors.naming_pattern}
          hint="{n} is the desktop's number, {n:03} pads it to 3 digits."
        />
      </div>
      <TextField label="Description" value={draft.description} onChange={set("description")} error={errors.description} />
      <div className="grid">
        <SelectField label="Cluster" value={draft.cluster_id} onChange={set("cluster_id")} error={errors.cluster_id}>
          <option value="">Choose a cluster</option>
          {clusters.data?.items.map((cluster) => (
            <option key={cluster.id} value={cluster.id}>
              {cluster.name}
            </option>
          ))}
        </SelectField>
        <SelectField label="Template" value={draft.template} onChange={set("template")} error={errors.template}>
          <option value="">Choose a template</option>
          {templates.data?.items.map((item) => (
            <option key={`${item.node}/${item.id}`} value={item.id}>
              {item.name} ({item.os_type}, {item.node})
            </option>
          ))}
          {draft.template && !templates.data?.items.some((item) => item.id === draft.template) ? (
            <option value={draft.template}>{draft.template}</option>
          ) : null}
        </SelectField>
      </div>
      <div className="grid">
        <SelectField label="Kind" value={draft.kind} onChange={set("kind")} error={errors.kind}>
          <option value="non_persistent">Non-persistent (rebuilt after logoff)</option>
          <option value="persistent">Persistent (one desktop per user)</option>
        </SelectField>
        <SelectField label="Guest OS" value={draft.os_type} onChange={set("os_type")} error={errors.os_type}>
          <option value="linux">Linux</option>
          <option value="windows">Windows</option>
        </SelectField>
        <SelectField label="Clones" value={draft.clone_mode} onChange={set("clone_mode")} error={errors.clone_mode}>
          <option value="linked">Linked</option>
          <option value="full">Full</option>
        </SelectField>
      </div>
      <div className="grid">
        <TextField label="Minimum size" type="number" min={0} value={draft.min_size} onChange={set("min_size")} error={errors.min_size} />
        <TextField label="Maximum size" type="number" min={1} value={draft.max_size} onChange={set("max_size")} error={errors.max_size} />
        <TextField label="Spare desktops" type="number" min={0} value={draft.spare} onChange={set("spare")} error={errors.spare} />
      </div>
      <SelectField
        label="Capacity schedule"
        value={draft.schedule_id}
        onChange={set("schedule_id")}
        error={errors.schedule_id}
        hint="Its phase in force sets the ready and spare desktops and powers idle ones off; none: the sizes above around the clock."
      >
        <option value="">None</option>
        {schedules.data?.items.map((schedule) => (
          <option key={schedule.id} value={schedule.id}>
            {schedule.name} ({schedule.time_zone})
          </option>
        ))}
        {draft.schedule_id && !schedules.data?.items.some((schedule) => schedule.id === draft.schedule_id) ? (
          <option value={draft.schedule_id}>{draft.schedule_id}</option>
        ) : null}
      </SelectField>
      <details open={Boolean(pool?.target_nodes.length || pool?.storage) || undefined}>
        <summary>Placement</summary>
        <fieldset aria-describedby={nodesError ? "target-nodes-hint target-nodes-error" : "target-nodes-hint"}>
          <legend>Target nodes</legend>
          {nodeNames.length ? (
            nodeNames.map((name) => (
              <label key={name}>
                <input
                  type="checkbox"
                  name="target_nodes"
                  value={name}
                  checked={draft.target_nodes.includes(name)}
                  onChange={() => toggleNode(name)}
                />
                {name}
              </label>
            ))
          ) : (
            <p>{draft.cluster_id ? (nodes.isLoading ? "Loading the cluster's nodes…" : "The cluster lists no node.") : "Choose a cluster first."}</p>
          )}
          <small id="target-nodes-hint">None checked: new desktops may go to any node.</small>
          {nodesError ? (
            <small id="target-nodes-error" className="field-error">
              {nodesError}
            </small>
          ) : null}
        </fieldset>
        <TextField
          label="Storage"
          value={draft.storage}
          onChange={set("storage")}
          error={errors.storage}
          hint="Where new desktops' disks go; empty: the template's storage."
        />
      </details>
      <details>
        <summary>Session policy</summary>
        <div className="grid">
          <SelectField label="Protocol" value={draft.protocol} onChange={set("protocol")} error={errors["session_policy.protocol"]}>
            <option value="auto">Automatic (RDP for Windows, else VNC)</option>
            <option value="rdp">RDP</option>
            <option value="vnc">VNC</option>
          </SelectField>
          <SelectField
            label="When a session ends"
            value={draft.after_disconnect}
            onChange={set("after_disconnect")}
            error={errors["session_policy.after_disconnect"]}
          >
            <option value="logoff_immediately">Log off at once</option>
            <option value="logoff_after_delay">Log off after a delay</option>
            <option value="never">Keep the user signed in</option>
          </SelectField>
        </div>
        <div className="grid">
          <TextField label="Log-off delay (seconds)" type="number" min={0} value={draft.logoff_delay} onChange={set("logoff_delay")} error={errors["session_policy.logoff_delay"]} />
          <TextField label="Idle timeout (seconds)" type="number" min={1} value={draft.idle_timeout} onChange={set("idle_timeout")} error={errors["session_policy.idle_timeout"]} hint="Empty: none." />
          <TextField label="Longest session (seconds)" type="number" min={1} value={draft.max_session_duration} onChange={set("max_session_duration")} error={errors["session_policy.max_session_duration"]} hint="Empty: none." />
        </div>
        <fieldset>
          <legend>Recording</legend>
          <label>
            <input
              type="checkbox"
              checked={draft.recording}
              onChange={(event) => setDraft((current) => ({ ...current, recording: event.target.checked }))}
              aria-describedby="recording-hint"
            />{" "}
            Record sessions
          </label>
          <label>
            <input
              type="checkbox"
              checked={draft.recording && draft.include_keys}
              disabled={!draft.recording}
              onChange={(event) => setDraft((current) => ({ ...current, include_keys: event.target.checked }))}
            />{" "}
            Record keystrokes too
          </label>
          <small id="recording-hint">
            Sessions opened from then on are recorded; their users are told before the desktop appears. Keystrokes include
            passwords typed into the desktop: leave them out unless a policy requires them.
          </small>
          {errors["session_policy.recording"] ? <small className="field-error">{errors["session_policy.recording"]}</small> : null}
        </fieldset>
        <ClientPolicyFields draft={draft.client} onChange={(client) => setDraft((current) => ({ ...current, client }))} errors={errors} />
      </details>
      <details>
        <summary>Domain join</summary>
        <div className="grid">
          <TextField label="Domain" value={draft.domain} onChange={set("domain")} error={errors["domain_join.domain"]} />
          <TextField label="Join account" value={draft.domain_username} onChange={set("domain_username")} error={errors["domain_join.username"]} />
        </div>
        <div className="grid">
          <TextField label="Organizational unit" value={draft.domain_ou} onChange={set("domain_ou")} error={errors["domain_join.organizational_unit"]} />
          <TextField
            label="Join password"
            type="password"
            autoComplete="new-password"
            value={draft.domain_password}
            onChange={set("domain_password")}
            error={errors["domain_join.password"]}
            hint={pool?.domain_join ? "Write-only: leave empty to keep the stored one." : "Write-only: never shown again."}
          />
        </div>
      </details>
      <button type="submit" aria-busy={save.isPending}>
        {submitLabel ?? (pool ? "Save changes" : "Create pool")}
      </button>
    </form>
  );
}

export function NewPoolPage() {
  return (
    <section>
      <h1>New pool</h1>
      <PoolForm />
    </section>
  );
}
