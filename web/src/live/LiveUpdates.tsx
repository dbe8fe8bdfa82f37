/**
 * Live updates: the API's event stream invalidates the queries of what changed, in place.
 *
 * One stream serves every tab of the browser signed in as the same user: the tabs elect a leader
 * with a Web Lock (held while the tab lives, handed to a waiting tab when it closes) and the
 * leader shares each event and the stream's state on a BroadcastChannel. Six tabs cost one
 * stream, not six against the API's per-user limit. A browser without Web Locks or
 * BroadcastChannel reads one stream per tab, as before.
 */
import { useQueryClient, type QueryClient } from "@tanstack/react-query";
import { createContext, useEffect, useState, type ReactNode } from "react";
import { useSession } from "../session";
import { readEventStream, type ServerEvent } from "./sse";

/** connecting: before the first event stream opened; reconnecting: it dropped and is asked again. */
export type LiveState = "connecting" | "open" | "reconnecting" | "offline";
export const LiveContext = createContext<LiveState>("connecting");

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

/** What the state of the stream reads as, once it has been open at least once. */
export function stateAfter(stream: "connecting" | "open" | "closed", wasOpen: boolean, online: boolean): LiveState {
  if (!online) return "offline";
  if (stream === "open") return "open";
  return wasOpen || stream === "closed" ? "reconnecting" : "connecting";
}

/** The messages tabs exchange: the leader's events and state; a new tab's hello. */
export type TabMessage = { kind: "event"; event: ServerEvent } | { kind: "state"; state: LiveState } | { kind: "hello" };

export function LiveUpdates({ children }: { children: ReactNode }) {
  const { config, getToken, me } = useSession();
  const client = useQueryClient();
  const [state, setState] = useState<LiveState>("connecting");
  const userId = me.id;
  useEffect(() => {
    const controller = new AbortController();
    const invalidate = batcher(client);
    // The last event id any tab saw: a tab taking the stream over resumes after it.
    let lastSeen = "";
    const apply = (event: ServerEvent) => {
      if (event.id) lastSeen = event.id;
      // A reset: the stream lost its place; everything on screen may be stale.
      if (event.event === "reset") void client.invalidateQueries();
      else invalidate(keysFor(event));
    };
    const name = `deskpool-live:${config.apiBaseUrl}:${userId}`;
    const shared = typeof BroadcastChannel !== "undefined" && typeof navigator !== "undefined" && "locks" in navigator;
    const channel = shared ? new BroadcastChannel(name) : null;
    let leading = false;
    let current: LiveState = "connecting";
    const show = (next: LiveState) => {
      current = next;
      setState(next);
      if (leading) channel?.postMessage({ kind: "state", state: next } satisfies TabMessage);
    };
    const lead = async (takingOver: boolean) => {
      let wasOpen = false;
      await readEventStream({
        url: `${config.apiBaseUrl}/api/v1/events`,
        getToken,
        signal: controller.signal,
        lastEventId: lastSeen,
        onState: (stream) => {
          show(stateAfter(stream, wasOpen, navigator.onLine));
          if (stream === "open" && !wasOpen && takingOver) {
            // Between the former leader's end and this stream, events may have passed unseen
            // (none to resume after, or too old): every tab reads what it shows again.
            const reset: ServerEvent = { id: "", event: "reset", data: "{}" };
            apply(reset);
            channel?.postMessage({ kind: "event", event: reset } satisfies TabMessage);
          }
          wasOpen = wasOpen || stream === "open";
        },
        onEvent: (event) => {
          apply(event);
          channel?.postMessage({ kind: "event", event } satisfies TabMessage);
        },
        retryMs: 3000,
      });
    };
    if (!channel) {
      void lead(false);
      return () => controller.abort();
    }
    channel.onmessage = (message: MessageEvent<TabMessage>) => {
      const data = message.data;
      if (data.kind === "hello") {
        if (leading) channel.postMessage({ kind: "state", state: current } satisfies TabMessage);
      } else if (!leading) {
        if (data.kind === "event") apply(data.event);
        else show(data.state);
      }
    };
    channel.postMessage({ kind: "hello" } satisfies TabMessage);
    const leadHolding = async (takingOver: boolean) => {
      leading = true;
      await lead(takingOver);
    };
    // The lock free at once: this tab leads. Else another tab does, and this one waits to take
    // over when that tab closes.
    navigator.locks
      .request(name, { ifAvailable: true }, async (lock) => {
        if (lock) return leadHolding(false);
        await navigator.locks
          .request(name, { signal: controller.signal }, () => leadHolding(true))
          .catch(() => undefined); // aborted while waiting: the tab closed as a follower
      })
      .catch(() => undefined);
    return () => {
      controller.abort();
      channel.close();
    };
  }, [client, config.apiBaseUrl, getToken, userId]);
  return <LiveContext.Provider value={state}>{children}</LiveContext.Provider>;
}
