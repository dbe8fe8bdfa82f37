import { describe, expect, it } from "vitest";
import type { Schemas } from "../api/client";
import { bodyOf, draftOf } from "./PoolForm";

const pool = {
  id: "p",
  name: "lab",
  description: "",
  cluster_id: "c",
  template: "t",
  kind: "non_persistent",
  os_type: "windows",
  clone_mode: "linked",
  min_size: 1,
  max_size: 4,
  spare: 1,
  naming_pattern: "lab-{n:02}",
  target_nodes: ["node-a", "node-b"],
  storage: "fast-ssd",
  state: "enabled",
  domain_join: { domain: "corp.example", username: "join", organizational_unit: null },
  session_policy: {
    protocol: "auto",
    after_disconnect: "logoff_after_delay",
    logoff_delay: 300,
    idle_timeout: null,
    max_session_duration: 3600,
  },
} as unknown as Schemas["Pool"];

describe("the pool form", () => {
  it("keeps every setting of a pool it changes", () => {
    const body = bodyOf(draftOf(pool), pool);
    expect(body).toMatchObject({
      name: "lab",
      template: "t",
      naming_pattern: "lab-{n:02}",
      min_size: 1,
      max_size: 4,
      spare: 1,
      target_nodes: ["node-a", "node-b"],
      storage: "fast-ssd",
      domain_join: { domain: "corp.example", username: "join", organizational_unit: null },
      session_policy: { after_disconnect: "logoff_after_delay", logoff_delay: 300, max_session_duration: 3600 },
    });
    expect(body.domain_join).not.toHaveProperty("password");
  });

  it("sends no storage and any node when left empty", () => {
    const body = bodyOf({ ...draftOf(), target_nodes: [], storage: "  " });
    expect(body.target_nodes).toEqual([]);
    expect(body.storage).toBeNull();
    expect(body).not.toHaveProperty("domain_join");
  });

  it("sends the pool's schedule, or none", () => {
    expect(bodyOf(draftOf({ ...pool, schedule_id: "s1" }), pool).schedule_id).toBe("s1");
    expect(bodyOf({ ...draftOf({ ...pool, schedule_id: "s1" }), schedule_id: "" }, pool).schedule_id).toBeNull();
    expect(bodyOf(draftOf()).schedule_id).toBeNull();
  });

  it("sends the default client policy for a new pool, and keeps a pool's own", () => {
    const fresh = bodyOf(draftOf());
    expect(fresh.session_policy?.client).toEqual({
      clipboard: { to_desktop: { mode: "text", max_bytes: 262144 }, to_browser: { mode: "text", max_bytes: 262144 } },
      file_transfer: { upload: false, download: false, max_file_bytes: 104857600 },
      audio: { output: true, microphone: false },
      printing: false,
      watermark: { enabled: false, text: "{name} · {session_id} · {client_address} · {time}", opacity: 0.15, angle: -30, spacing: 240 },
    });
    const own = { ...fresh.session_policy!.client!, printing: true, watermark: { ...fresh.session_policy!.client!.watermark!, enabled: true } };
    const withPolicy = { ...pool, session_policy: { ...pool.session_policy, client: own } } as Schemas["Pool"];
    expect(bodyOf(draftOf(withPolicy), withPolicy).session_policy?.client).toEqual(own);
    const locked = { ...draftOf(withPolicy), client: { ...draftOf(withPolicy).client, copy: "off" as const, copy_bytes: "4096" } };
    expect(bodyOf(locked, withPolicy).session_policy?.client?.clipboard?.to_browser).toEqual({ mode: "off", max_bytes: 4096 });
  });

  it("keeps a pool's recording, and sends keystrokes only with recording on", () => {
    expect(bodyOf(draftOf()).session_policy?.recording).toEqual({ enabled: false, include_keys: false });
    const recorded = { ...pool, session_policy: { ...pool.session_policy, recording: { enabled: true, include_keys: true } } } as Schemas["Pool"];
    expect(bodyOf(draftOf(recorded), recorded).session_policy?.recording).toEqual({ enabled: true, include_keys: true });
    const off = { ...draftOf(recorded), recording: false };
    expect(bodyOf(off, recorded).session_policy?.recording).toEqual({ enabled: false, include_keys: false });
  });

  it("removes the domain join of a pool when the domain is emptied", () => {
    const body = bodyOf({ ...draftOf(pool), domain: "" }, pool);
    expect(body.domain_join).toBeNull();
  });
});
