/** Users, groups and their members, roles, grants and OIDC group bindings. */
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useState, type FormEvent } from "react";
import { useUnsavedDraft } from "../components/Unsaved";
import { NavLink, Navigate, Route, Routes, useParams } from "react-router";
import { unwrap, type Schemas } from "../api/client";
import { pageSize, useCursorList } from "../api/lists";
import { can } from "../auth/permissions";
import { UserName } from "../components/Names";
import { DataTable } from "../components/DataTable";
import { SelectField, TextField } from "../components/Field";
import { fieldErrorsOf, ProblemAlert } from "../components/Problem";
import { when } from "../format";
import { useSession } from "../session";

type User = Schemas["User"];

/** A person and a service principal (client credentials) with one subject are two users. */
const KIND_LABELS: Record<"human" | "service" | "unsettled", string> = {
  human: "person",
  service: "service principal",
  unsettled: "not known until its next sign-in",
};

function userLabel(user: { display_name?: string | null; email?: string | null; subject?: string; user_id?: string }) {
  return user.display_name || user.email || user.subject || user.user_id || "";
}

/** A person added by the issuer's subject, to be entitled before their first sign-in. */
function AddUser() {
  const { api } = useSession();
  const client = useQueryClient();
  const [draft, setDraft] = useState({ subject: "", display_name: "" });
  useUnsavedDraft(draft);
  const add = useMutation({
    mutationFn: () =>
      unwrap(
        api.POST("/api/v1/users", {
          body: { subject: draft.subject.trim(), display_name: draft.display_name.trim() || undefined },
        }),
      ),
    onSuccess: () => {
      setDraft({ subject: "", display_name: "" });
      void client.invalidateQueries({ queryKey: ["users"] });
    },
  });
  const errors = fieldErrorsOf(add.error);
  return (
    <details>
      <summary>Add a person who has not signed in yet</summary>
      <form
        className="inline-form"
        aria-label="Add a person"
        onSubmit={(event) => {
          event.preventDefault();
          add.mutate();
        }}
      >
        <TextField
          label="Subject at the identity provider"
          value={draft.subject}
          onChange={(e) => setDraft({ ...draft, subject: e.target.value })}
          error={errors.subject}
          hint="Their sub claim (an email is not enough: anyone may claim one)."
          required
        />
        <TextField
          label="Name to show"
          value={draft.display_name}
          onChange={(e) => setDraft({ ...draft, display_name: e.target.value })}
          error={errors.display_name}
        />
        <button type="submit" aria-busy={add.isPending}>
          Add the person
        </button>
      </form>
      {add.isSuccess ? (
        <p role="status">Added: entitle them to a pool or add them to a group; their first sign-in finds it.</p>
      ) : null}
      <ProblemAlert error={add.error} />
    </details>
  );
}

function Users() {
  const { api, me } = useSession();
  const client = useQueryClient();
  const [q, setQ] = useState("");
  const list = useCursorList(["users", "list", q], (cursor) =>
    unwrap(api.GET("/api/v1/users", { params: { query: { limit: pageSize(cursor), cursor, q: q || undefined } } })),
  );
  const toggle = useMutation({
    mutationFn: (user: User) =>
      unwrap(api.PATCH("/api/v1/users/{user_id}", { params: { path: { user_id: user.id } }, body: { disabled: !user.disabled } })),
    onSettled: () => void client.invalidateQueries({ queryKey: ["users"] }),
  });
  return (
    <>
      <div className="filters">
        <TextField label="Search users" type="search" value={q} onChange={(e) => setQ(e.target.value)} />
      </div>
      {can(me, "users:manage") ? <AddUser /> : null}
      <ProblemAlert error={list.error ?? toggle.error} />
      <DataTable
        caption="Users"
        {...list.table}
        rowKey={(u) => u.id}
        columns={[
          { header: "Name", cell: (u) => u.display_name ?? "—" },
          { header: "Email", cell: (u) => u.email ?? "—" },
          { header: "Subject", cell: (u) => <code>{u.subject}</code> },
          { header: "Kind", cell: (u) => KIND_LABELS[u.kind] },
          { header: "Last seen", cell: (u) => when(u.last_seen_at) },
          {
            header: "Status",
            cell: (u) =>
              can(me, "users:manage") ? (
                <button type="button" className="secondary outline small" onClick={() => toggle.mutate(u)}>
                  {u.disabled ? "Enable" : "Disable"} {userLabel(u)}
                </button>
              ) : u.disabled ? (
                "disabled"
              ) : (
                "active"
              ),
          },
        ]}
      />
    </>
  );
}

function Groups() {
  const { api, me } = useSession();
  const client = useQueryClient();
  const [draft, setDraft] = useState({ key: "", name: "" });
  useUnsavedDraft(draft);
  const groups = useQuery({
    queryKey: ["groups", "list"],
    queryFn: () => unwrap(api.GET("/api/v1/groups", { params: { query: { limit: 500 } } })),
  });
  const create = useMutation({
    mutationFn: () => unwrap(api.POST("/api/v1/groups", { body: { key: draft.key.trim(), name: draft.name.trim() } })),
    onSuccess: () => {
      setDraft({ key: "", name: "" });
      void client.invalidateQueries({ queryKey: ["groups"] });
    },
  });
  const errors = fieldErrorsOf(create.error);
  const submit = (event: FormEvent) => {
    event.preventDefault();
    create.mutate();
  };
  return (
    <>
      {can(me, "groups:manage") ? (
        <form onSubmit={submit} noValidate aria-label="New group" className="inline-form">
          <TextField label="Group key" value={draft.key} onChange={(e) => setDraft({ ...draft, key: e.target.value })} error={errors.key} />
          <TextField label="Group name" value={draft.name} onChange={(e) => setDraft({ ...draft, name: e.target.value })} error={errors.name} />
          <button type="submit">Create group</button>
        </form>
      ) : null}
      <ProblemAlert error={groups.error ?? create.error} />
      <DataTable
        caption="Groups"
        rows={groups.data?.items ?? []}
        rowKey={(g) => g.id}
        loading={groups.isLoading}
        columns={[
          { header: "Name", cell: (g) => <NavLink to={`/people/groups/${g.id}`}>{g.name}</NavLink> },
          { header: "Key", cell: (g) => <code>{g.key}</code> },
          { header: "Description", cell: (g) => g.description || "—" },
        ]}
      />
    </>
  );
}

function GroupDetail() {
  const { groupId = "" } = useParams();
  const { api, me } = useSession();
  const client = useQueryClient();
  const [userId, setUserId] = useState("");
  useUnsavedDraft(userId);
  const path = { group_id: groupId };
  const group = useQuery({
    queryKey: ["groups", groupId],
    queryFn: () => unwrap(api.GET("/api/v1/groups/{group_id}", { params: { path } })),
  });
  const members = useQuery({
    queryKey: ["groups", groupId, "members"],
    queryFn: () => unwrap(api.GET("/api/v1/groups/{group_id}/members", { params: { path, query: { limit: 500 } } })),
  });
  const users = useQuery({
    queryKey: ["users", "all"],
    enabled: can(me, "users:read"),
    queryFn: () => unwrap(api.GET("/api/v1/users", { params: { query: { limit: 500 } } })),
  });
  const add = useMutation({
    mutationFn: (id: string) =>
      unwrap(api.PUT("/api/v1/groups/{group_id}/members/{user_id}", { params: { path: { ...path, user_id: id } } })),
    onSuccess: () => {
      setUserId("");
      void client.invalidateQueries({ queryKey: ["groups", groupId, "members"] });
    },
  });
  const remove = useMutation({
    mutationFn: (id: string) =>
      unwrap(api.DELETE("/api/v1/groups/{group_id}/members/{user_id}", { params: { path: { ...path, user_id: id } } })),
    onSuccess: () => void client.invalidateQueries({ queryKey: ["groups", groupId, "members"] }),
  });
  const manage = can(me, "groups:manage");
  const submit = (event: FormEvent) => {
    event.preventDefault();
    if (userId) add.mutate(userId);
  };
  return (
    <>
      <h2>Group {group.data?.name ?? ""}</h2>
      <ProblemAlert error={group.error ?? members.error ?? add.error ?? remove.error} />
      {manage ? (
        <form onSubmit={submit} className="inline-form" aria-label="Add a member">
          <SelectField label="Add a user" value={userId} onChange={(e) => setUserId(e.target.value)}>
            <option value="">Choose a user…</option>
            {users.data?.items.map((user) => (
              <option key={user.id} value={user.id}>
                {userLabel(user)} ({user.email ?? user.subject})
              </option>
            ))}
          </SelectField>
          <button type="submit">Add member</button>
        </form>
      ) : null}
      <DataTable
        caption="Members"
        rows={members.data?.items ?? []}
        rowKey={(m) => m.user_id}
        loading={members.isLoading}
        empty="No member yet."
        columns={[
          { header: "Member", cell: (m) => userLabel(m) },
          { header: "Email", cell: (m) => m.email ?? "—" },
          { header: "Added", cell: (m) => when(m.added_at) },
          {
            header: "Actions",
            cell: (m) =>
              manage ? (
                <button type="button" className="secondary outline small" onClick={() => remove.mutate(m.user_id)}>
                  Remove {userLabel(m)}
                </button>
              ) : null,
          },
        ]}
      />
    </>
  );
}

function Roles() {
  const { api } = useSession();
  const roles = useQuery({
    queryKey: ["roles", "list"],
    queryFn: () => unwrap(api.GET("/api/v1/roles", { params: { query: { limit: 500 } } })),
  });
  return (
    <>
      <ProblemAlert error={roles.error} />
      <DataTable
        caption="Roles"
        rows={roles.data?.items ?? []}
        rowKey={(r) => r.key}
        loading={roles.isLoading}
        columns={[
          { header: "Role", cell: (r) => <code>{r.key}</code> },
          { header: "Description", cell: (r) => r.description },
          { header: "Permissions", cell: (r) => r.permissions.join(", ") },
          { header: "Built in", cell: (r) => (r.builtin ? "yes" : "no") },
        ]}
      />
    </>
  );
}

function Grants() {
  const { api, me } = useSession();
  const client = useQueryClient();
  const [draft, setDraft] = useState({ subject: "", role: "" });
  useUnsavedDraft(draft);
  const grants = useQuery({
    queryKey: ["grants", "list"],
    queryFn: () => unwrap(api.GET("/api/v1/grants", { params: { query: { limit: 500 } } })),
  });
  const roles = useQuery({
    queryKey: ["roles", "list"],
    queryFn: () => unwrap(api.GET("/api/v1/roles", { params: { query: { limit: 500 } } })),
  });
  const groups = useQuery({
    queryKey: ["groups", "list"],
    enabled: can(me, "groups:read"),
    queryFn: () => unwrap(api.GET("/api/v1/groups", { params: { query: { limit: 500 } } })),
  });
  const create = useMutation({
    mutationFn: () => {
      const [subject_type, subject_id] = draft.subject.split(":") as ["user" | "group", string];
      return unwrap(api.POST("/api/v1/grants", { body: { subject_type, subject_id, role_key: draft.role } }));
    },
    onSuccess: () => void client.invalidateQueries({ queryKey: ["grants"] }),
  });
  const revoke = useMutation({
    mutationFn: (id: string) => unwrap(api.DELETE("/api/v1/grants/{grant_id}", { params: { path: { grant_id: id } } })),
    onSuccess: () => void client.invalidateQueries({ queryKey: ["grants"] }),
  });
  const names = new Map(groups.data?.items.map((g) => [g.id, `group ${g.name}`]));
  const manage = can(me, "roles:manage");
  const errors = fieldErrorsOf(create.error);
  return (
    <>
      {manage ? (
        <form
          className="inline-form"
          aria-label="New grant"
          onSubmit={(event) => {
            event.preventDefault();
            create.mutate();
          }}
        >
          <SelectField label="Group" value={draft.subject} onChange={(e) => setDraft({ ...draft, subject: e.target.value })} error={errors.subject_id}>
            <option value="">Choose a group…</option>
            {groups.data?.items.map((g) => (
              <option key={g.id} value={`group:${g.id}`}>
                {g.name}
              </option>
            ))}
          </SelectField>
          <SelectField label="Role" value={draft.role} onChange={(e) => setDraft({ ...draft, role: e.target.value })} error={errors.role_key}>
            <option value="">Choose a role…</option>
            {roles.data?.items.map((r) => (
              <option key={r.key} value={r.key}>
                {r.key}
              </option>
            ))}
          </SelectField>
          <button type="submit">Grant</button>
        </form>
      ) : null}
      <ProblemAlert error={grants.error ?? create.error ?? revoke.error} />
      <DataTable
        caption="Grants"
        rows={grants.data?.items ?? []}
        rowKey={(g) => g.id}
        loading={grants.isLoading}
        columns={[
          {
            header: "To",
            cell: (g) =>
              g.subject_type === "user" ? (
                <>
                  user <UserName id={g.subject_id} name={g.subject_name} email={g.subject_email} />
                </>
              ) : (
                <span title={`Group id ${g.subject_id}`}>
                  {names.get(g.subject_id) ?? `group ${g.subject_name ?? "(deleted)"}`}
                </span>
              ),
          },
          { header: "Role or permission", cell: (g) => <code>{g.role_key ?? g.permission}</code> },
          { header: "Source", cell: (g) => g.source },
          {
            header: "Actions",
            cell: (g) =>
              manage && g.source === "api" ? (
                <button type="button" className="secondary outline small" onClick={() => revoke.mutate(g.id)}>
                  Revoke
                </button>
              ) : null,
          },
        ]}
      />
    </>
  );
}

function Bindings() {
  const { api, me } = useSession();
  const client = useQueryClient();
  const [draft, setDraft] = useState({ claim: "", group: "" });
  useUnsavedDraft(draft);
  const bindings = useQuery({
    queryKey: ["bindings", "list"],
    queryFn: () => unwrap(api.GET("/api/v1/oidc-group-bindings", { params: { query: { limit: 500 } } })),
  });
  const groups = useQuery({
    queryKey: ["groups", "list"],
    enabled: can(me, "groups:read"),
    queryFn: () => unwrap(api.GET("/api/v1/groups", { params: { query: { limit: 500 } } })),
  });
  const create = useMutation({
    mutationFn: () =>
      unwrap(api.POST("/api/v1/oidc-group-bindings", { body: { claim_value: draft.claim.trim(), group_id: draft.group } })),
    onSuccess: () => {
      setDraft({ claim: "", group: "" });
      void client.invalidateQueries({ queryKey: ["bindings"] });
    },
  });
  const remove = useMutation({
    mutationFn: (id: string) =>
      unwrap(api.DELETE("/api/v1/oidc-group-bindings/{binding_id}", { params: { path: { binding_id: id } } })),
    onSuccess: () => void client.invalidateQueries({ queryKey: ["bindings"] }),
  });
  const manage = can(me, "roles:manage");
  const errors = fieldErrorsOf(create.error);
  return (
    <>
      <p>A user whose token's group claim holds the value becomes a member of the local group at sign-in.</p>
      {manage ? (
        <form
          className="inline-form"
          aria-label="New binding"
          onSubmit={(event) => {
            event.preventDefault();
            create.mutate();
          }}
        >
          <TextField label="Claim value" value={draft.claim} onChange={(e) => setDraft({ ...draft, claim: e.target.value })} error={errors.claim_value} />
          <SelectField label="Local group" value={draft.group} onChange={(e) => setDraft({ ...draft, group: e.target.value })} error={errors.group_id}>
            <option value="">Choose a group…</option>
            {groups.data?.items.map((g) => (
              <option key={g.id} value={g.id}>
                {g.name}
              </option>
            ))}
          </SelectField>
          <button type="submit">Bind</button>
        </form>
      ) : null}
      <ProblemAlert error={bindings.error ?? create.error ?? remove.error} />
      <DataTable
        caption="OIDC group bindings"
        rows={bindings.data?.items ?? []}
        rowKey={(b) => b.id}
        loading={bindings.isLoading}
        columns={[
          { header: "Claim value", cell: (b) => <code>{b.claim_value}</code> },
          { header: "Group", cell: (b) => b.group_key },
          { header: "Source", cell: (b) => b.source },
          {
            header: "Actions",
            cell: (b) =>
              manage && b.source === "api" ? (
                <button type="button" className="secondary outline small" onClick={() => remove.mutate(b.id)}>
                  Delete
                </button>
              ) : null,
          },
        ]}
      />
    </>
  );
}

export function PeoplePage() {
  const { me } = useSession();
  const tabs = [
    { to: "users", label: "Users", show: can(me, "users:read") },
    { to: "groups", label: "Groups", show: can(me, "groups:read") },
    { to: "roles", label: "Roles", show: can(me, "roles:read") },
    { to: "grants", label: "Grants", show: can(me, "roles:read") },
    { to: "bindings", label: "OIDC bindings", show: can(me, "roles:read") },
  ].filter((tab) => tab.show);
  return (
    <section>
      <h1>People and permissions</h1>
      <nav aria-label="People" className="tabs">
        <ul>
          {tabs.map((tab) => (
            <li key={tab.to}>
              <NavLink to={`/people/${tab.to}`}>{tab.label}</NavLink>
            </li>
          ))}
        </ul>
      </nav>
      <Routes>
        <Route index element={<Navigate to={tabs[0]?.to ?? "users"} replace />} />
        <Route path="users" element={<Users />} />
        <Route path="groups" element={<Groups />} />
        <Route path="groups/:groupId" element={<GroupDetail />} />
        <Route path="roles" element={<Roles />} />
        <Route path="grants" element={<Grants />} />
        <Route path="bindings" element={<Bindings />} />
      </Routes>
    </section>
  );
}
