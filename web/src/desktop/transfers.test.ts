import { describe, expect, it } from "vitest";
import {
  COPY_OFF,
  DOWNLOAD_OFF,
  FORBIDDEN,
  OVERRUN,
  PASTE_OFF,
  UPLOAD_OFF,
  pasteRefusal,
  policyNotes,
  progressOf,
  updateTransfer,
  uploadRefusal,
  type ClientPolicy,
} from "./transfers";

const OPEN: ClientPolicy = {
  clipboard: { to_desktop: { mode: "text", max_bytes: 262144 }, to_browser: { mode: "text", max_bytes: 1024 } },
  file_transfer: { upload: true, download: true, max_file_bytes: 1048576 },
  audio: { output: true, microphone: false },
  printing: false,
  watermark: { enabled: false, text: "{name}", opacity: 0.15, angle: -30, spacing: 240 },
} as ClientPolicy;

describe("policyNotes", () => {
  it("says nothing when everything is allowed or no policy came", () => {
    expect(policyNotes(OPEN)).toEqual({ copy: null, paste: null, upload: null, download: null });
    expect(policyNotes(undefined).copy).toBeNull();
  });

  it("says in words what the administrator turned off", () => {
    const locked = {
      ...OPEN,
      clipboard: { to_desktop: { mode: "off", max_bytes: 1 }, to_browser: { mode: "off", max_bytes: 1 } },
      file_transfer: { upload: false, download: false, max_file_bytes: 1 },
    } as ClientPolicy;
    expect(policyNotes(locked)).toEqual({ copy: COPY_OFF, paste: PASTE_OFF, upload: UPLOAD_OFF, download: DOWNLOAD_OFF });
    expect(COPY_OFF).toBe("Copying out of this desktop is turned off by your administrator.");
  });
});

describe("refusals", () => {
  it("turns the gateway's statuses into words", () => {
    expect(pasteRefusal(0, OPEN)).toBeNull();
    expect(pasteRefusal(FORBIDDEN, OPEN)).toBe(PASTE_OFF);
    expect(pasteRefusal(OVERRUN, OPEN)).toContain("256.0 KiB");
    expect(uploadRefusal(FORBIDDEN, OPEN)).toBe(UPLOAD_OFF);
    expect(uploadRefusal(OVERRUN, OPEN)).toContain("1.0 MiB");
    expect(uploadRefusal(0, OPEN)).toBeNull();
  });
});

describe("transfers", () => {
  it("adds, updates and measures transfers", () => {
    let list = updateTransfer([], { id: 1, direction: "upload", name: "a.txt", done: 0, size: 10, state: "running" });
    list = updateTransfer(list, { id: 1, direction: "upload", name: "a.txt", done: 5, size: 10, state: "running" });
    expect(list).toHaveLength(1);
    expect(progressOf(list[0]!)).toBe(0.5);
    expect(progressOf({ id: 2, direction: "download", name: "b", done: 3, state: "running" })).toBeNull();
    expect(progressOf({ id: 2, direction: "download", name: "b", done: 3, state: "finished" })).toBe(1);
  });
});
