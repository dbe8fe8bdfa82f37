/**
 * What the desktop view says about clipboard and file transfers: the pool's client policy in
 * words (what is turned off, before the user tries), a refusal the gateway or the desktop
 * answers (an `ack` with an error status) in words, never silently, what the gateway
 * withheld from the desktop's side (a copy, a download, a print job: its `TRANSFER_NOTICE`),
 * the microphone's refusal, and the list of uploads and downloads with their progress.
 */
import type { Schemas } from "../api/client";

export type ClientPolicy = Schemas["ClientPolicy"];

/** Guacamole statuses a transfer may be answered with. */
export const FORBIDDEN = 0x0303;
export const OVERRUN = 0x030d;
export const UNSUPPORTED = 0x0100;

export const COPY_OFF = "Copying out of this desktop is turned off by your administrator.";
export const PASTE_OFF = "Pasting into this desktop is turned off by your administrator.";
export const UPLOAD_OFF = "Uploading files to this desktop is turned off by your administrator.";
export const DOWNLOAD_OFF = "Downloading files from this desktop is turned off by your administrator.";
export const PRINT_OFF = "Printing from this desktop is turned off by your administrator.";
export const MICROPHONE_OFF = "The microphone is turned off for this desktop by your administrator.";

/**
 * The `msg` code by which the gateway tells the browser of a transfer from the desktop it
 * withheld or cut (its arguments: kind, reason, file name, limit in bytes), since the browser
 * never sees it otherwise.
 */
export const TRANSFER_NOTICE = 0x4450;

/** What the policy turns off, in words (nothing when no policy came with the connection). */
export function policyNotes(policy: ClientPolicy | undefined): {
  copy: string | null;
  paste: string | null;
  upload: string | null;
  download: string | null;
} {
  if (!policy) return { copy: null, paste: null, upload: null, download: null };
  return {
    copy: policy.clipboard.to_browser.mode === "off" ? COPY_OFF : null,
    paste: policy.clipboard.to_desktop.mode === "off" ? PASTE_OFF : null,
    upload: policy.file_transfer.upload ? null : UPLOAD_OFF,
    download: policy.file_transfer.download ? null : DOWNLOAD_OFF,
  };
}

/** A byte count for people. */
export function formatBytes(bytes: number): string {
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(1)} KiB`;
  return `${(bytes / 1024 / 1024).toFixed(1)} MiB`;
}

/** Why a clipboard paste was answered with `code`, in words (null: it was not refused). */
export function pasteRefusal(code: number, policy: ClientPolicy | undefined): string | null {
  if (code === 0) return null;
  if (code === OVERRUN) {
    const limit = policy?.clipboard.to_desktop.max_bytes;
    return `The text was cut: your administrator allows at most ${limit ? formatBytes(limit) : "a limited size"} per paste.`;
  }
  if (code === FORBIDDEN) return PASTE_OFF;
  return "This desktop does not accept pasted text.";
}

/** Why an upload was answered with `code`, in words (null: it was not refused). */
export function uploadRefusal(code: number, policy: ClientPolicy | undefined): string | null {
  if (code === 0) return null;
  if (code === OVERRUN) {
    const limit = policy?.file_transfer.max_file_bytes;
    return `The file is larger than your administrator allows${limit ? ` (${formatBytes(limit)})` : ""}: it was cut.`;
  }
  if (code === FORBIDDEN) return UPLOAD_OFF;
  if (code === UNSUPPORTED) return "This desktop does not take files.";
  return "The desktop refused the file.";
}

/** What the gateway's `TRANSFER_NOTICE` (`[kind, reason, name, limit]`) means, in words. */
export function noticeText(args: string[]): string {
  const [kind = "", reason = "", name = "", limit = "0"] = args;
  if (reason === "clipboard_off") return COPY_OFF;
  if (reason === "download_off") return `${name || "A file"} did not reach you. ${DOWNLOAD_OFF}`;
  if (reason === "printing_off") return PRINT_OFF;
  if (reason === "not_text") {
    return "The desktop copied something other than text, which your administrator does not let out.";
  }
  if (reason === "over_limit" && kind === "clipboard") {
    return `What the desktop copied was cut: your administrator allows at most ${formatBytes(Number(limit))} per copy.`;
  }
  if (reason === "over_limit") {
    return `${name || "A file"} was cut: your administrator allows at most ${formatBytes(Number(limit))} per file.`;
  }
  return "The desktop sent something your administrator does not let out.";
}

/** Why the microphone was answered with `code`, in words (null: it was not refused). */
export function microphoneRefusal(code: number): string | null {
  if (code === 0) return null;
  if (code === FORBIDDEN) return MICROPHONE_OFF;
  return "This desktop does not take a microphone.";
}

/** One upload or download and how far it went. */
export interface Transfer {
  id: number;
  direction: "upload" | "download";
  name: string;
  /** Bytes the other side took (upload) or received (download). */
  done: number;
  /** The whole size, when known (an upload's). */
  size?: number;
  state: "running" | "finished" | "refused" | "failed";
  /** Why it was refused or failed, in words. */
  message?: string;
  /** A download's content, once finished. */
  url?: string;
}

/** `transfers` with `change` applied to the one with `id` (added when new). */
export function updateTransfer(transfers: Transfer[], change: Transfer): Transfer[] {
  const index = transfers.findIndex((t) => t.id === change.id);
  if (index < 0) return [...transfers, change];
  const next = transfers.slice();
  next[index] = change;
  return next;
}

/** How far a transfer went, for its progress bar: 0..1, or null when the size is unknown. */
export function progressOf(transfer: Transfer): number | null {
  if (transfer.state === "finished") return 1;
  if (!transfer.size) return null;
  return Math.min(transfer.done / transfer.size, 1);
}
