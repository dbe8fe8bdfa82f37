import { describe, expect, it } from "vitest";
import { keysFor } from "./LiveUpdates";
import { EventStreamParser, readEventStream, type ServerEvent } from "./sse";

describe("event stream parser", () => {
  it("parses events split across chunks, with ids, types and comments", () => {
    const parser = new EventStreamParser();
    expect(parser.feed(": keep-alive\n\nid: 1-0\nevent: desktop.state\nda")).toEqual([]);
    expect(parser.feed('ta: {"a":1}\n\nid: 2-0\ndata: x\r\ndata: y\r\n\r\n')).toEqual([
      { id: "1-0", event: "desktop.state", data: '{"a":1}' },
      { id: "2-0", event: "message", data: "x\ny" },
    ]);
    expect(parser.lastEventId).toBe("2-0");
  });

  it("keeps the last id across events without one and reads retry", () => {
    const parser = new EventStreamParser();
    const events = parser.feed("id: 7\ndata: a\n\nretry: 1500\ndata: b\n\n");
    expect(events.map((e) => e.id)).toEqual(["7", "7"]);
    expect(parser.retry).toBe(1500);
  });

  it("reconnects with Last-Event-ID and the bearer token", async () => {
    const seen: Array<Record<string, string>> = [];
    const controller = new AbortController();
    const received: ServerEvent[] = [];
    let call = 0;
    const fetcher = async (_url: string, init: RequestInit) => {
      seen.push({ ...(init.headers as Record<string, string>) });
      call += 1;
      if (call === 1) return new Response("id: 5-0\nevent: pool.changed\ndata: {}\n\n", { status: 200 });
      controller.abort();
      return new Response("", { status: 200 });
    };
    await readEventStream({
      url: "http://api/api/v1/events",
      getToken: async () => "t0ken",
      onEvent: (event) => received.push(event),
      signal: controller.signal,
      retryMs: 1,
      fetcher: fetcher as unknown as typeof fetch,
    });
    expect(received).toEqual([{ id: "5-0", event: "pool.changed", data: "{}" }]);
    expect(seen[0]!.Authorization).toBe("Bearer t0ken");
    expect(seen[0]!["Last-Event-ID"]).toBeUndefined();
    expect(seen[1]!["Last-Event-ID"]).toBe("5-0");
  });

  it("maps event types to the lists they make stale", () => {
    expect(keysFor({ id: "", event: "desktop.state_changed", data: "" })).toContain("desktops");
    expect(keysFor({ id: "", event: "pool.reconciled", data: "" })).toEqual(expect.arrayContaining(["pool", "desktops"]));
    expect(keysFor({ id: "", event: "job.progress", data: "" })).toEqual(["jobs", "dashboard"]);
    expect(keysFor({ id: "", event: "other", data: "" })).toEqual([]);
  });
});

describe("live state and refusals", () => {
  it("says reconnecting, not offline, once the stream drops while the network is up", async () => {
    const { stateAfter } = await import("./LiveUpdates");
    expect(stateAfter("connecting", false, true)).toBe("connecting");
    expect(stateAfter("open", false, true)).toBe("open");
    expect(stateAfter("closed", true, true)).toBe("reconnecting");
    expect(stateAfter("connecting", true, true)).toBe("reconnecting");
    expect(stateAfter("closed", false, true)).toBe("reconnecting");
    expect(stateAfter("closed", true, false)).toBe("offline");
  });

  it("waits a refusal's Retry-After, bounded", async () => {
    const { retryAfter } = await import("./sse");
    expect(retryAfter(new Response("", { status: 429, headers: { "Retry-After": "7" } }))).toBe(7000);
    expect(retryAfter(new Response("", { status: 429, headers: { "Retry-After": "600" } }))).toBe(60000);
    expect(retryAfter(new Response("", { status: 500 }))).toBeNull();
  });
});
