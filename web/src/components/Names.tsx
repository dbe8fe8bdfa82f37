/**
 * Names where the API would otherwise give only ids: a user by name and email, the id on hover
 * (and in the copy of a selection, through the title), never the id instead of a name.
 */

export interface NamedUser {
  id: string | null | undefined;
  name?: string | null;
  email?: string | null;
}

/** "Name" with the email beside it (muted) and the id as the title; "—" for no user. */
export function UserName({ id, name, email }: NamedUser) {
  if (!id) return <>—</>;
  const title = `User id ${id}`;
  if (!name && !email) return <span title={title}>unknown user</span>;
  return (
    <span className="user-name" title={title}>
      {name || email}
      {email && name && name !== email ? <small className="meta"> {email}</small> : null}
    </span>
  );
}

/** A pool's name (its id on hover); "deleted pool" once the pool is gone. */
export function PoolName({ id, name }: { id: string; name?: string | null }) {
  return <span title={`Pool id ${id}`}>{name ?? "deleted pool"}</span>;
}

/** How an actor of the audit trail or a rollout reads: a user's name, else the platform's role. */
export function actorWords(actor: string, name?: string | null): string {
  if (name) return name;
  if (actor.startsWith("system:")) return `deskpool (${actor.slice("system:".length).replace(/_/g, " ")})`;
  if (actor === "break-glass:cli") return "operator (break-glass command)";
  if (/^[0-9a-f-]{36}$/i.test(actor)) return "deleted user";
  return actor;
}
