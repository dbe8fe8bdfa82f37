/**
 * Every Guacamole status a desktop connection can end with, in words, with what to do.
 *
 * The codes are libguac's (`guac_protocol_status`): the gateway closes a tunnel with one of them
 * (the close frame's reason, or an `error` instruction just before it), guacd may send its own in
 * an `error` instruction, and guacamole-common-js uses a few itself (a tunnel that stops
 * answering is UPSTREAM_TIMEOUT). The user sees the sentence, never a bare code; the code is
 * kept for support beside it. The gateway's table is in docs/operators/gateway.md, and a test
 * (tests/unit/gateway/test_console_statuses.py) checks that every status the gateway can send is
 * described here.
 */

export interface StatusText {
  /** A short headline ("Desktop connection lost"). */
  title: string;
  /** What happened and what to do, in a sentence or two. */
  advice: string;
  /** Whether the desktop is kept for the user (reconnecting finds it as it was). */
  kept: boolean;
}

const AGAIN = "Select Reconnect; if it happens again, tell your administrator.";

export const STATUS_TEXT: Record<number, StatusText> = {
  0x0000: {
    title: "Disconnected",
    advice: "The desktop closed the connection. Select Reconnect to open it again.",
    kept: true,
  },
  0x0100: {
    title: "Not supported",
    advice: `The desktop does not support what this connection asked for. ${AGAIN}`,
    kept: true,
  },
  0x0200: {
    title: "Service error",
    advice: "deskpool could not check your connection just now (an internal error). Wait a moment, then select Reconnect.",
    kept: true,
  },
  0x0201: {
    title: "Service busy",
    advice: "The desktop service is busy. Wait a moment, then select Reconnect.",
    kept: true,
  },
  0x0202: {
    title: "Your desktop did not respond",
    advice: `Your desktop showed nothing in time: it may still be starting, or its sign-in was refused. ${AGAIN}`,
    kept: true,
  },
  0x0203: {
    title: "Desktop connection lost",
    advice:
      "The connection to your desktop was lost: the service that shows it stopped. Your desktop and your work are kept: select Reconnect to continue where you left off.",
    kept: true,
  },
  0x0204: {
    title: "Desktop no longer yours",
    advice:
      "This desktop was removed, logged off or given to someone else since you opened it. Go back to My desktops and open your pool again.",
    kept: false,
  },
  0x0205: {
    title: "Desktop busy",
    advice: "The desktop is busy with another connection. Wait a moment, then select Reconnect.",
    kept: true,
  },
  0x0206: {
    title: "Session closed",
    advice: "The desktop's session was closed. Select Reconnect to open it again.",
    kept: true,
  },
  0x0207: {
    title: "Desktop unreachable",
    advice: `The service that shows desktops could not reach your desktop. Wait a moment, then select Reconnect; if it happens again, tell your administrator.`,
    kept: true,
  },
  0x0208: {
    title: "Gateway restarting",
    advice: "The desktop gateway is restarting. Your desktop is kept: select Reconnect to continue.",
    kept: true,
  },
  0x0209: {
    title: "Opened elsewhere",
    advice: "Your desktop was opened somewhere else. Select Reconnect to bring it back here.",
    kept: true,
  },
  0x020a: {
    title: "Disconnected for inactivity",
    advice:
      "You were disconnected after a while without using the desktop. It is kept for you for a time: select Reconnect to continue.",
    kept: true,
  },
  0x020b: {
    title: "Session closed",
    advice:
      "Your session was closed by an administrator, or reached its longest allowed length. Select Reconnect to open it again.",
    kept: true,
  },
  0x0300: {
    title: "Request refused",
    advice: "The browser sent something the desktop gateway could not accept. Reload the page, then select Reconnect.",
    kept: true,
  },
  0x0301: {
    title: "Sign-in refused",
    advice: `The connection was not allowed: its single-use pass expired or was already used, or the desktop refused the sign-in. ${AGAIN}`,
    kept: true,
  },
  0x0303: {
    title: "Access removed",
    advice:
      "You are no longer allowed to use this desktop: an administrator changed your access. Go back to My desktops, or ask your administrator.",
    kept: false,
  },
  0x0308: {
    title: "Browser not responding",
    advice: "Your browser stopped answering (the network dropped, or the computer slept). Select Reconnect.",
    kept: true,
  },
  0x030d: {
    title: "Too much input",
    advice: "The browser sent more than the connection takes at once. Select Reconnect.",
    kept: true,
  },
  0x030f: {
    title: "Request refused",
    advice: "The browser sent data of a kind the connection does not take. Reload the page, then select Reconnect.",
    kept: true,
  },
  0x031d: {
    title: "Too many connections",
    advice: "The desktop gateway is at its limit of open connections. Wait a moment, then select Reconnect.",
    kept: true,
  },
};

/** The words for status `code` (a generic sentence, with the code, for one not listed). */
export function describeStatus(code: number | undefined): StatusText {
  const known = code === undefined ? undefined : STATUS_TEXT[code];
  if (known) return known;
  return {
    title: "Connection lost",
    advice: `The connection ended unexpectedly${code === undefined ? "" : ` (status ${code})`}. ${AGAIN}`,
    kept: true,
  };
}
