/**
 * The filters lists share: a user looked up by name or email (the list then asks the API for
 * that user's rows), and a pool chosen by name.
 */
import { useQuery } from "@tanstack/react-query";
import { useEffect, useId, useState } from "react";
import { unwrap } from "../api/client";
import { can } from "../auth/permissions";
import { useSession } from "../session";

type User = { id: string; display_name?: string | null; email?: string | null; subject: string };

/** How a user is offered in the picker: "Name (email)". */
export function userOption(user: User): string {
  const name = user.display_name || user.email || user.subject;
  return user.email && name !== user.email ? `${name} (${user.email})` : name;
}

/**
 * A text field that looks users up as one types (`GET /api/v1/users?q=`) and offers the matches;
 * `onChange` gets the id of the user whose option is typed or chosen, `undefined` otherwise.
 */
export function UserFilter({ onChange, label = "User" }: { onChange: (userId: string | undefined) => void; label?: string }) {
  const { api, me } = useSession();
  const id = useId();
  const [text, setText] = useState("");
  const search = text.replace(/\s*\(.*$/, "").trim();
  const users = useQuery({
    queryKey: ["users", "search", search],
    enabled: can(me, "users:read") && search.length > 0,
    queryFn: () => unwrap(api.GET("/api/v1/users", { params: { query: { q: search, limit: 20 } } })),
  });
  const matches = users.data?.items ?? [];
  const chosen = matches.find((user) => userOption(user) === text.trim());
  const chosenId = chosen?.id;
  useEffect(() => onChange(chosenId), [chosenId, onChange]);
  return (
    <div className="field filter">
      <label htmlFor={id}>{label}</label>
      <input
        id={id}
        type="search"
        list={`${id}-users`}
        value={text}
        placeholder="Name or email"
        autoComplete="off"
        onChange={(event) => setText(event.target.value)}
        aria-describedby={`${id}-hint`}
      />
      <datalist id={`${id}-users`}>
        {matches.map((user) => (
          <option key={user.id} value={userOption(user)} />
        ))}
      </datalist>
      <small id={`${id}-hint`} className="meta">
        {text && !chosen ? (matches.length ? "Choose one of the matches." : "No user matches.") : chosen ? "" : "Any user."}
      </small>
    </div>
  );
}

/** A select of the pools by name ("Any pool" first). */
export function PoolFilter({ value, onChange }: { value: string; onChange: (poolId: string) => void }) {
  const { api, me } = useSession();
  const id = useId();
  const pools = useQuery({
    queryKey: ["pools", "names"],
    enabled: can(me, "pools:read"),
    queryFn: () => unwrap(api.GET("/api/v1/pools", { params: { query: { limit: 500 } } })),
  });
  return (
    <div className="field filter">
      <label htmlFor={id}>Pool</label>
      <select id={id} value={value} onChange={(event) => onChange(event.target.value)}>
        <option value="">Any pool</option>
        {pools.data?.items.map((pool) => (
          <option key={pool.id} value={pool.id}>
            {pool.name}
          </option>
        ))}
      </select>
    </div>
  );
}
