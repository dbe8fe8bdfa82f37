/**
 * The desktop's remote display through the gateway, with guacamole-common-js 1.6 (loaded only
 * here, as its own chunk). The gateway's tunnel is a WebSocket; the connect data carries the
 * single-use token and the size of the browser's window.
 *
 * The remote display is scaled to fit the view (a desktop larger than the window is shown
 * whole), and follows the window's resizes. A new size is asked of the desktop only once the
 * client is connected (the desktop drew its first frame): guacd 1.6.0 crashes the connection
 * when a size reaches it earlier (the gateway holds such input too, for any client).
 */

import { TRANSFER_NOTICE, type Transfer } from "./transfers";

export type DesktopState = "connecting" | "waiting" | "connected" | "disconnected" | "error";

export interface DesktopCallbacks {
  /** `code` is the Guacamole status of an error (514: the desktop did not answer in time). */
  onState: (state: DesktopState, detail?: string, code?: number) => void;
  onClipboard: (text: string) => void;
  /** A file the desktop sends (a download, a printed PDF) started, advanced or ended. */
  onDownload?: (download: Transfer) => void;
  /** The gateway withheld or cut something the desktop sent (`[kind, reason, name, limit]`). */
  onNotice?: (args: string[]) => void;
}

export interface DesktopHandle {
  disconnect: () => void;
  ctrlAltDel: () => void;
  /** The view is now `width` x `height`: fit the display, and ask the desktop for that size. */
  resize: (width: number, height: number) => void;
  /** Give the desktop `text`; calls `answered` with the status of a refusal (never for none). */
  sendClipboard: (text: string, answered?: (code: number) => void) => void;
  /** Send `file` to the desktop (its drive, its SFTP folder); `progress` follows it. */
  upload: (file: File, id: number, progress: (upload: Transfer) => void) => void;
  /**
   * Send the browser's microphone to the desktop (until the connection ends); `answered` is
   * called with the status of a refusal, or 0 once the desktop took it.
   */
  microphone: (answered: (code: number) => void) => void;
}

/** What the microphone is sent as (guacd's RDP plugin takes 16-bit PCM). */
const MICROPHONE_MIMETYPE = "audio/L16;rate=44100,channels=2";

/** Bytes per ``blob`` of an upload (guacd's own limit). */
const UPLOAD_BLOCK = 6048;

/** Base64 of `bytes` (chunked: `String.fromCharCode` takes a bounded number of arguments). */
export function toBase64(bytes: Uint8Array): string {
  let binary = "";
  for (let i = 0; i < bytes.length; i += 0x8000) binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(binary);
}

/** The scale at which a `width` x `height` display fits a `viewWidth` x `viewHeight` view. */
export function fitScale(width: number, height: number, viewWidth: number, viewHeight: number): number | null {
  if (width <= 0 || height <= 0 || viewWidth <= 0 || viewHeight <= 0) return null;
  return Math.min(viewWidth / width, viewHeight / height);
}

/** X11 keysyms of the keys in Ctrl+Alt+Del. */
export const CTRL_ALT_DEL = [0xffe3, 0xffe9, 0xffff];

/** The connect data the gateway reads (token, display size and resolution). */
export function connectData(token: string, width: number, height: number, dpi = 96): string {
  const params = new URLSearchParams({
    token,
    width: String(Math.max(1, Math.round(width))),
    height: String(Math.max(1, Math.round(height))),
    dpi: String(dpi),
  });
  for (const mimetype of ["image/png", "image/jpeg", "image/webp"]) params.append("image", mimetype);
  try {
    params.set("timezone", Intl.DateTimeFormat().resolvedOptions().timeZone);
  } catch {
    // no time zone: the desktop keeps its own
  }
  return params.toString();
}

// guacamole-common-js's type definitions are incomplete; the few members used are typed here.
/* eslint-disable @typescript-eslint/no-explicit-any */
type Guac = any;

export async function openDesktop(
  container: HTMLElement,
  url: string,
  token: string,
  callbacks: DesktopCallbacks,
  options: { readOnly?: boolean } = {},
): Promise<DesktopHandle> {
  const G: Guac = await import("@glokon/guacamole-common-js");
  const tunnel = new G.WebSocketTunnel(url);
  const client = new G.Client(tunnel);
  const display = client.getDisplay();
  const element: HTMLElement = display.getElement();
  container.replaceChildren(element);
  let closed = false;
  let connected = false;
  // The size the desktop was asked for last (the connect data's, then each resize's).
  let asked = { width: Math.round(container.clientWidth), height: Math.round(container.clientHeight) };

  const fit = () => {
    const scale = fitScale(display.getWidth(), display.getHeight(), container.clientWidth, container.clientHeight);
    if (scale !== null) display.scale(scale);
  };
  display.onresize = fit;
  const askSize = (width: number, height: number) => {
    width = Math.round(width);
    height = Math.round(height);
    if (options.readOnly || !connected || width <= 0 || height <= 0) return;
    if (width === asked.width && height === asked.height) return;
    asked = { width, height };
    client.sendSize(width, height);
  };

  client.onstatechange = (state: number) => {
    // Guacamole.Client.State: 0 idle, 1 connecting, 2 waiting, 3 connected, 4 disconnecting, 5 disconnected
    if (state === 1) callbacks.onState("connecting");
    else if (state === 2) callbacks.onState("waiting");
    else if (state === 3) {
      // The desktop drew its first frame: now it may be resized (to the view's size of now).
      connected = true;
      fit();
      askSize(container.clientWidth, container.clientHeight);
      callbacks.onState("connected");
    } else if (state === 5 && !closed) {
      closed = true;
      callbacks.onState("disconnected");
    }
  };
  const failed = (status: { code?: number; message?: string }) => {
    if (closed) return;
    closed = true;
    callbacks.onState("error", status?.message || `status ${status?.code ?? "unknown"}`, status?.code);
  };
  client.onerror = failed;
  tunnel.onerror = failed;
  // Answers to the streams this view sends (clipboard, uploads), read off the tunnel: the
  // client forgets a stream once it sent its `end`, and the answer that matters may come
  // later (the gateway's refusal of a paste, guacd's "OK (STREAM END)" of an upload).
  const answers = new Map<string, (code: number) => void>();
  const handleInstruction = tunnel.oninstruction;
  tunnel.oninstruction = (opcode: string, args: string[]) => {
    if (opcode === "ack") answers.get(args[0] ?? "")?.(Number(args[2]));
    handleInstruction(opcode, args);
  };
  // The gateway's word of what it withheld from the desktop's side (nothing else uses `msg`
  // codes of this value; guacd's own, a user joining or leaving, go on to the defaults).
  client.onmsg = (code: number, args: string[]) => {
    if (code !== TRANSFER_NOTICE) return true;
    callbacks.onNotice?.(args);
    return false;
  };
  client.onclipboard = (stream: Guac, mimetype: string) => {
    if (!/^text\//.test(mimetype)) return;
    const reader = new G.StringReader(stream);
    let text = "";
    reader.ontext = (chunk: string) => {
      text += chunk;
    };
    reader.onend = () => callbacks.onClipboard(text);
  };
  // A file from the desktop (a download, a printed PDF): acknowledged blob by blob, as
  // guacd sends the next only then; kept in memory and offered as a link once complete.
  let downloads = 0;
  client.onfile = (stream: Guac, mimetype: string, filename: string) => {
    const id = -++downloads;
    const chunks: BlobPart[] = [];
    let done = 0;
    const report = (change: Partial<Transfer>) =>
      callbacks.onDownload?.({ id, direction: "download", name: filename, done, state: "running", ...change });
    report({});
    stream.onblob = (data: string) => {
      const binary = atob(data);
      const bytes = new Uint8Array(binary.length);
      for (let i = 0; i < binary.length; i += 1) bytes[i] = binary.charCodeAt(i);
      chunks.push(bytes);
      done += bytes.length;
      report({});
      stream.sendAck("OK", 0);
    };
    stream.onend = () => {
      const url = URL.createObjectURL(new Blob(chunks, { type: mimetype }));
      report({ state: "finished", url });
    };
    stream.sendAck("OK", 0);
  };

  // A read-only viewer (watching a session) sends no input: guacd would ignore it anyway.
  const keyboard = options.readOnly ? null : new G.Keyboard(container);
  if (keyboard) {
    const mouse = new G.Mouse(element);
    const sendMouse = (event: Guac) => client.sendMouseState(event.state ?? event, true);
    if (typeof mouse.onEach === "function") mouse.onEach(["mousedown", "mouseup", "mousemove"], sendMouse);
    else mouse.onmousedown = mouse.onmouseup = mouse.onmousemove = sendMouse;
    keyboard.onkeydown = (keysym: number) => {
      client.sendKeyEvent(1, keysym);
      return false;
    };
    keyboard.onkeyup = (keysym: number) => client.sendKeyEvent(0, keysym);
  }

  callbacks.onState("connecting");
  client.connect(connectData(token, asked.width, asked.height));

  return {
    disconnect: () => {
      closed = true;
      if (keyboard) {
        keyboard.onkeydown = null;
        keyboard.onkeyup = null;
      }
      client.disconnect();
    },
    ctrlAltDel: () => {
      for (const keysym of CTRL_ALT_DEL) client.sendKeyEvent(1, keysym);
      for (const keysym of [...CTRL_ALT_DEL].reverse()) client.sendKeyEvent(0, keysym);
    },
    // Everyone sees the display fitted to the view; only the session's owner, once
    // connected, sets the desktop's size.
    resize: (width, height) => {
      fit();
      askSize(width, height);
    },
    sendClipboard: (text, answered) => {
      const stream = client.createClipboardStream("text/plain");
      // guacd answers a clipboard stream only to refuse it; the gateway does too (771 when
      // the policy turns pasting off, 781 when the text was cut at its limit).
      answers.set(String(stream.index), (code) => {
        if (code) answered?.(code);
      });
      const writer = new G.StringWriter(stream);
      writer.sendText(text);
      writer.sendEnd();
    },
    microphone: (answered) => {
      const stream = client.createAudioStream(MICROPHONE_MIMETYPE);
      const index = String(stream.index);
      // The first answer says whether the desktop takes it (the recorder then starts the
      // browser's capture, asking the user's permission) or why not (the gateway's 771).
      answers.set(index, (code) => {
        answers.delete(index);
        answered(code);
      });
      G.AudioRecorder.getInstance(stream, MICROPHONE_MIMETYPE);
    },
    upload: (file, id, progress) => {
      const stream = client.createFileStream(file.type || "application/octet-stream", file.name);
      let offset = 0;
      let ended = false;
      const report = (change: Partial<Transfer>) =>
        progress({ id, direction: "upload", name: file.name, done: offset, size: file.size, state: "running", ...change });
      report({});
      const index = String(stream.index);
      // guacd acknowledges the stream's start, every blob and its end: the next goes only then.
      answers.set(index, async (code) => {
        if (code) {
          answers.delete(index);
          report({ state: "refused", message: String(code) });
          return;
        }
        if (ended) {
          answers.delete(index);
          report({ state: "finished" });
          return;
        }
        if (offset >= file.size) {
          ended = true;
          stream.sendEnd();
          return;
        }
        const chunk = new Uint8Array(await file.slice(offset, offset + UPLOAD_BLOCK).arrayBuffer());
        offset += chunk.length;
        stream.sendBlob(toBase64(chunk));
        report({});
      });
    },
  };
}
