/**
 * The desktop's remote display through the gateway, with guacamole-common-js 1.6 (loaded only
 * here, as its own chunk). The gateway's tunnel is a WebSocket; the connect data carries the
 * single-use token and the size of the browser's window.
 */

export type DesktopState = "connecting" | "waiting" | "connected" | "disconnected" | "error";

export interface DesktopCallbacks {
  onState: (state: DesktopState, detail?: string) => void;
  onClipboard: (text: string) => void;
}

export interface DesktopHandle {
  disconnect: () => void;
  ctrlAltDel: () => void;
  resize: (width: number, height: number) => void;
  sendClipboard: (text: string) => void;
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

  client.onstatechange = (state: number) => {
    // Guacamole.Client.State: 0 idle, 1 connecting, 2 waiting, 3 connected, 4 disconnecting, 5 disconnected
    if (state === 1) callbacks.onState("connecting");
    else if (state === 2) callbacks.onState("waiting");
    else if (state === 3) callbacks.onState("connected");
    else if (state === 5 && !closed) {
      closed = true;
      callbacks.onState("disconnected");
    }
  };
  const failed = (status: { code?: number; message?: string }) => {
    closed = true;
    callbacks.onState("error", status?.message || `status ${status?.code ?? "unknown"}`);
  };
  client.onerror = failed;
  tunnel.onerror = failed;
  client.onclipboard = (stream: Guac, mimetype: string) => {
    if (!/^text\//.test(mimetype)) return;
    const reader = new G.StringReader(stream);
    let text = "";
    reader.ontext = (chunk: string) => {
      text += chunk;
    };
    reader.onend = () => callbacks.onClipboard(text);
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
  client.connect(connectData(token, container.clientWidth, container.clientHeight));

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
    // The session's owner sets its size; a viewer sees it scaled as it is.
    resize: (width, height) => {
      if (!options.readOnly) client.sendSize(Math.round(width), Math.round(height));
    },
    sendClipboard: (text) => {
      const stream = client.createClipboardStream("text/plain");
      const writer = new G.StringWriter(stream);
      writer.sendText(text);
      writer.sendEnd();
    },
  };
}
