import { describe, expect, it } from "vitest";
import {
  COPY_OFF,
  DOWNLOAD_OFF,
  FORBIDDEN,
  MICROPHONE_OFF,
  OVERRUN,
  PASTE_OFF,
  PRINT_OFF,
  UNSUPPORTED,
  UPLOAD_OFF,
  microphoneRefusal,
  noticeText,
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

describe("noticeText", () => {
  it("says in words what the gateway withheld from the desktop", () => {
    expect(noticeText(["clipboard", "clipboard_off", "", "0"])).toBe(COPY_OFF);
    expect(noticeText(["file", "download_off", "report.xlsx", "0"])).toBe(
      `report.xlsx did not reach you. ${DOWNLOAD_OFF}`,
    );
    expect(noticeText(["print", "printing_off", "guacamole-print.pdf", "0"])).toBe(PRINT_OFF);
    expect(PRINT_OFF).toBe("Printing from this desktop is turned off by your administrator.");
  });

  it("says what was cut at its limit", () => {
    expect(noticeText(["clipboard", "over_limit", "", "64"])).toBe(
      "What the desktop copied was cut: your administrator allows at most 64 B per copy.",
    );
    expect(noticeText(["file", "over_limit", "big.iso", "2048"])).toBe(
      "big.iso was cut: your administrator allows at most 2.0 KiB per file.",
    );
  });

  it("never stays silent", () => {
    expect(noticeText(["clipboard", "not_text", "", "0"])).toBe(
      "The desktop copied something other than text, which your administrator does not let out.",
    );
    expect(noticeText(["thing", "whatever", "", "0"])).toBe(
      "The desktop sent something your administrator does not let out.",
    );
  });
});

describe("microphoneRefusal", () => {
  it("says why the microphone was refused", () => {
    expect(microphoneRefusal(0)).toBeNull();
    expect(microphoneRefusal(FORBIDDEN)).toBe(MICROPHONE_OFF);
    expect(MICROPHONE_OFF).toBe("The microphone is turned off for this desktop by your administrator.");
    expect(microphoneRefusal(UNSUPPORTED)).toBe("This desktop does not take a microphone.");
  });
});
