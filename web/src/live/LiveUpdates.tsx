/** Live updates: the API's event stream invalidates the queries of what changed, in place. */
import { useQueryClient, type QueryClient } from "@tanstack/react-query";
import { createContext, useEffect, useState, type ReactNode } from "react";
import { useSession } from "../session";
import { readEventStream, type ServerEvent } from "./sse";

export type LiveState = "connecting" | "open" | "closed";
export const LiveContext = createContext<LiveState>("closed");

/** Query keys each kind of event makes stale (the first segment of a query key names its list). */
export function keysFor(event: ServerEvent): string[] {
  const kind = event.event.split(".")[0] ?? "";
  switch (kind) {
    case "desktop":
      return ["desktops", "pools", "pool", "my-pools", "my-desktops", "rollouts", "dashboard"];
    case "pool":
      // A pool's reconciliation changes its desktops: its desktop table follows its counters.
      return ["pools", "pool", "desktops", "my-pools", "rollouts", "dashboard"];
    case "job":
      return ["jobs", "dashboard"];
    case "session":
      return ["sessions", "desktops", "my-pools", "my-sessions", "dashboard"];
    case "cluster":
      return ["clusters", "setup"];
    case "group":
      return ["groups", "grants", "bindings"];
    case "user":
      return ["users"];
    case "role":
    case "grant":
      return ["roles", "grants", "bindings"];
    case "license":
      return ["license"];
    case "message":
      return ["my-messages", "messages"];
    default:
      return [];
  }
}

/** Invalidate at most once per animation frame-ish window, so a burst costs one refetch. */
function batcher(client: QueryClient) {
  const pending = new Set<string>();
  let timer: ReturnType<typeof setTimeout> | null = null;
  return (keys: string[]) => {
    keys.forEach((key) => pending.add(key));
    if (timer) return;
    timer = setTimeout(() => {
      timer = null;
      const keys = [...pending];
      pending.clear();
      for (const key of keys) void client.invalidateQueries({ queryKey: [key] });
    }, 150);
  };
}

export function LiveUpdates({ children }: { children: ReactNode }) {
  const { config, getToken } = useSession();
  const client = useQueryClient();
  const [state, setState] = useState<LiveState>("connecting");
  useEffect(() => {
    const controller = new AbortController();
    const invalidate = batcher(client);
    void readEventStream({
      url: `${config.apiBaseUrl}/api/v1/events`,
      getToken,
      signal: controller.signal,
      onState: setState,
      onEvent: (event) => {
        // A reset: the stream lost its place; everything on screen may be stale.
        if (event.event === "reset") void client.invalidateQueries();
        else invalidate(keysFor(event));
      },
      retryMs: 3000,
    });
    return () => controller.abort();
  }, [client, config.apiBaseUrl, getToken]);
  return <LiveContext.Provider value={state}>{children}</LiveContext.Provider>;
}
