/**
 * The desktop in the browser: the whole window, keyboard (with Ctrl+Alt+Del), mouse, clipboard,
 * resizing with the window, the connection's state, reconnecting with a fresh token after a
 * drop, disconnecting (the pool's policy decides when the user is logged off) and logging off
 * (at once). An administrator watching a session (`?watch=<session id>`) sees it read-only.
 * A desktop that does not draw in time (status 514 before it was connected) is reconnected
 * once by itself before the error is shown. However the connection ends, the view says so in
 * words with what to do (`describeStatus`: every Guacamole status, never a bare code) and
 * offers Reconnect, which asks for a fresh token to the same desktop: after a lost connection
 * (515, the desktop daemon's connection died) the pool keeps the desktop, work included.
 *
 * Start on connect: when no desktop was running, the API answers a desktop being started for
 * the user (202, a pending connection). The view shows "Starting your desktop" ("Preparing
 * your desktop" when the pool is building one for the user: `starting.building`) with its
 * progress, read from `GET /api/v1/me/desktops`, which the user's live events refresh at each
 * of the desktop's state changes, and connects by itself once the desktop is handed to the
 * user (`in_use`).
 */
import { useQuery } from "@tanstack/react-query";
import { useCallback, useEffect, useRef, useState } from "react";
import { Link, useLocation, useNavigate, useParams, useSearchParams } from "react-router";
import { unwrap, type Schemas } from "../api/client";
import { describeError } from "../api/problem";
import { NoticeBanner } from "../components/NoticeBanner";
import { UserMessages } from "../components/UserMessages";
import { WatchNotice } from "../components/WatchNotice";
import type { DesktopHandle, DesktopState } from "../desktop/guacamole";
import { describeStatus } from "../desktop/status";
import {
  type ClientPolicy,
  type Transfer,
  formatBytes,
  microphoneRefusal,
  noticeText,
  pasteRefusal,
  policyNotes,
  progressOf,
  updateTransfer,
  uploadRefusal,
} from "../desktop/transfers";
import { useSession } from "../session";

type Connection = Schemas["Connection"];
type Pending = Schemas["PendingConnection"];
type ViewState = DesktopState | "idle" | "starting";

/** The steps of a desktop started for the user, and what each is called on the way. */
const START_STEPS: { states: string[]; label: string }[] = [
  { states: ["powered_off", "provisioning", "refreshing"], label: "Preparing the machine" },
  { states: ["starting"], label: "Powering on" },
  { states: ["waiting_for_agent", "waiting_for_windows"], label: "Waiting for the system to start" },
  { states: ["ready", "in_use"], label: "Ready: connecting" },
];

/** Which step a desktop state is (0-based). */
export function startStep(state: string): number {
  const index = START_STEPS.findIndex((step) => step.states.includes(state));
  return index < 0 ? 0 : index;
}

/** Guacamole status UPSTREAM_TIMEOUT: the desktop did not answer (or draw) in time. */
const UPSTREAM_TIMEOUT = 514;

/** What the view says while a desktop is being built for the user (the pool grew for him). */
const PREPARING = "Preparing your desktop";

const LABEL: Record<ViewState, string> = {
  idle: "Not connected",
  starting: "Starting your desktop",
  connecting: "Connecting…",
  waiting: "Waiting for the desktop…",
  connected: "Connected",
  disconnected: "Disconnected",
  error: "Connection lost",
};

export function DesktopViewPage() {
  const { desktopId = "" } = useParams();
  const [search] = useSearchParams();
  const watching = search.get("watch");
  const { api } = useSession();
  const navigate = useNavigate();
  const location = useLocation();
  const screen = useRef<HTMLDivElement>(null);
  const handle = useRef<DesktopHandle | null>(null);
  const [state, setState] = useState<ViewState>("idle");
  const [detail, setDetail] = useState("");
  // The Guacamole status the connection ended with (undefined: none, or not a tunnel's end).
  const [code, setCode] = useState<number | undefined>(undefined);
  const [clipboard, setClipboard] = useState("");
  // What the desktop copied last (shown when the policy lets it out).
  const [copied, setCopied] = useState("");
  const [showClipboard, setShowClipboard] = useState(false);
  // The pool's client policy for this connection, and what was refused, in words.
  const [policy, setPolicy] = useState<ClientPolicy | undefined>(undefined);
  const [refusal, setRefusal] = useState("");
  const [transfers, setTransfers] = useState<Transfer[]>([]);
  // Whether the desktop took the browser's microphone.
  const [listening, setListening] = useState(false);
  const uploads = useRef(0);
  // The pool records this session: said before the desktop's first frame is drawn.
  const [recorded, setRecorded] = useState(false);
  const opened = location.state as { connection?: Connection; starting?: Pending } | null;
  const first = useRef<Connection | null>(opened?.connection ?? null);
  // A desktop being started for the user (start on connect), and when this view learnt it.
  const [starting, setStarting] = useState<{ pending: Pending; since: number } | null>(
    opened?.starting ? { pending: opened.starting, since: Date.now() } : null,
  );
  // The desktop is being built for the user (the pool grew), not powered on: said once, kept.
  const [building, setBuilding] = useState(Boolean(opened?.starting?.starting.building));

  // Which connection attempt is current (callbacks of older ones are ignored), and whether
  // the current one is already the automatic retry.
  const attempt = useRef(0);
  const retried = useRef(false);

  const connect = useCallback(async (retry = false) => {
    handle.current?.disconnect();
    handle.current = null;
    const current = ++attempt.current;
    if (!retry) retried.current = false;
    setState("connecting");
    setCode(undefined);
    setDetail(retry ? "the desktop did not answer in time, trying again" : "");
    try {
      // The token of the page that opened the desktop once; a fresh one for every reconnect.
      let connection = first.current;
      first.current = null;
      if (!connection && watching) {
        const shadow = await unwrap(
          api.POST("/api/v1/sessions/{session_id}/shadow", { params: { path: { session_id: watching } } }),
        );
        connection = shadow.connection;
      } else if (!connection) {
        const answer = await unwrap(
          api.POST("/api/v1/me/desktops/{desktop_id}/connection", { params: { path: { desktop_id: desktopId } } }),
        );
        if (current !== attempt.current) return;
        if (!("connection" in answer)) {
          // 202: the desktop is being started for the user; the live events say when it is in use.
          setStarting({ pending: answer, since: Date.now() });
          if (answer.starting.building) setBuilding(true);
          setState("starting");
          return;
        }
        connection = answer.connection;
      }
      setRecorded(Boolean(connection.recorded));
      setPolicy(connection.client);
      const { openDesktop } = await import("../desktop/guacamole");
      if (!screen.current || current !== attempt.current) return;
      let drawn = false;
      const opened = await openDesktop(screen.current, connection.url, connection.token, {
        onState: (next, why, status) => {
          if (current !== attempt.current) return;
          if (next === "connected") drawn = true;
          if (next === "error" && status === UPSTREAM_TIMEOUT && !drawn && !retried.current) {
            retried.current = true;
            void connect(true);
            return;
          }
          setState(next);
          setDetail(why ?? "");
          setCode(next === "error" ? status : next === "disconnected" ? 0 : undefined);
        },
        onClipboard: (text) => {
          setCopied(text);
          setClipboard(text);
        },
        onDownload: (download) => setTransfers((list) => updateTransfer(list, download)),
        // The gateway withheld or cut what the desktop sent: said in words, the panel opened.
        onNotice: (args) => {
          setRefusal(noticeText(args));
          setShowClipboard(true);
        },
      }, { readOnly: Boolean(watching) });
      // A newer attempt began while this one opened: this one must not stay connected unseen
      // (its keyboard would still send the user's typing to a second connection).
      if (current !== attempt.current) {
        opened.disconnect();
        return;
      }
      handle.current = opened;
      screen.current?.focus();
    } catch (error) {
      if (current !== attempt.current) return;
      setState("error");
      setDetail(describeError(error));
    }
  }, [api, desktopId, watching]);

  useEffect(() => {
    if (starting) setState("starting");
    else void connect();
    return () => {
      attempt.current += 1;
      handle.current?.disconnect();
      handle.current = null;
    };
  }, [connect]);

  useEffect(() => {
    const element = screen.current;
    if (!element) return;
    let timer: ReturnType<typeof setTimeout> | null = null;
    const observer = new ResizeObserver(() => {
      if (timer) clearTimeout(timer);
      timer = setTimeout(() => handle.current?.resize(element.clientWidth, element.clientHeight), 200);
    });
    observer.observe(element);
    return () => observer.disconnect();
  }, []);

  // While a desktop is started for the user: its state, from the user's desktops (refreshed by
  // the live events at each change); once it is the user's, in use, connect.
  const mine = useQuery({
    queryKey: ["my-desktops"],
    queryFn: () => unwrap(api.GET("/api/v1/me/desktops")),
    enabled: starting !== null,
  });
  const startedDesktop = mine.data?.items.find((item) => item.id === desktopId) ?? null;
  const progress = startedDesktop?.state ?? starting?.pending.state ?? "starting";
  useEffect(() => {
    if (!starting || !mine.data || mine.dataUpdatedAt < starting.since) return;
    if (startedDesktop?.state === "in_use") {
      setStarting(null);
      void connect();
    } else if (!startedDesktop || startedDesktop.state === "failed") {
      setStarting(null);
      setState("error");
      setDetail("your desktop could not be started; try again, or ask your administrator");
    }
  }, [starting, mine.data, mine.dataUpdatedAt, startedDesktop, connect]);

  const back = watching ? "/sessions" : "/my";
  const disconnect = () => {
    handle.current?.disconnect();
    handle.current = null;
    navigate(back);
  };
  const [loggingOff, setLoggingOff] = useState(false);
  /** Log off at once (the API asks the gateway to close the session), then leave. */
  const logOff = async () => {
    if (!window.confirm("Log off from this desktop? Programs still open on it are closed.")) return;
    setLoggingOff(true);
    try {
      const done = await unwrap(
        api.POST("/api/v1/me/desktops/{desktop_id}/logoff", { params: { path: { desktop_id: desktopId } } }),
      );
      handle.current?.disconnect();
      handle.current = null;
      navigate("/my", { state: { notice: `You were logged off from ${done.name}.` } });
    } catch (error) {
      setDetail(describeError(error));
    } finally {
      setLoggingOff(false);
    }
  };
  const live = state === "connected" || state === "waiting" || state === "connecting" || state === "starting";
  // How the connection ended, in words: the status's when there is one, else what failed.
  const ended = !live && code !== undefined ? describeStatus(code) : null;
  const label = state === "starting" && building ? PREPARING : LABEL[state];
  const headline = ended ? ended.title : `${label}${detail ? `: ${detail}` : ""}`;
  return (
    <div className="desktop-view">
      <div className="desktop-bar" role="toolbar" aria-label="Desktop">
        <span className="state" role="status" aria-live="polite" data-state={state} data-status={code}>
          {headline}
        </span>
        {watching ? (
          <span className="badge badge-info">Watching read-only</span>
        ) : (
          <>
            <button type="button" className="secondary" onClick={() => handle.current?.ctrlAltDel()} disabled={state !== "connected"}>
              Ctrl+Alt+Del
            </button>
            <button type="button" className="secondary" onClick={() => setShowClipboard((value) => !value)} aria-expanded={showClipboard}>
              Clipboard and files
            </button>
          </>
        )}
        <button
          type="button"
          className="secondary"
          onClick={() => void document.documentElement.requestFullscreen?.().catch(() => undefined)}
        >
          Full screen
        </button>
        {!live ? (
          <button type="button" onClick={() => void connect()}>
            Reconnect
          </button>
        ) : null}
        <button type="button" className="contrast" onClick={disconnect}>
          {watching ? "Stop watching" : "Disconnect"}
        </button>
        {watching ? null : (
          <button type="button" className="secondary" onClick={() => void logOff()} aria-busy={loggingOff}>
            Log off
          </button>
        )}
        <Link to={back}>{watching ? "Sessions" : "My desktops"}</Link>
      </div>
      {watching ? null : <NoticeBanner desktopId={desktopId} />}
      {watching ? null : <WatchNotice />}
      {watching ? null : <UserMessages />}
      {state === "starting" ? (
        <div className="desktop-starting" role="status" aria-live="polite" data-testid="desktop-starting">
          <h2>{label}</h2>
          <p>
            {building ? "No desktop was free, so one is being prepared for you" : "No desktop was running, so one is being started for you"}
            {startedDesktop ? (
              <>
                {" "}
                (<strong>{startedDesktop.name}</strong>)
              </>
            ) : null}
            . You are connected as soon as it is ready.
          </p>
          <progress value={startStep(progress) + 1} max={START_STEPS.length} aria-label={label} />
          <ol className="start-steps">
            {START_STEPS.map((step, index) => (
              <li
                key={step.label}
                data-step={index < startStep(progress) ? "done" : index === startStep(progress) ? "current" : "next"}
                aria-current={index === startStep(progress) ? "step" : undefined}
              >
                {step.label}
              </li>
            ))}
          </ol>
        </div>
      ) : null}
      {recorded ? (
        <p className="recording-notice" role="note" data-testid="recording-notice">
          This session is recorded: what the desktop shows is kept and may be watched by
          administrators.
        </p>
      ) : null}
      {showClipboard && !watching ? (
        <TransferPanel
          policy={policy}
          clipboard={clipboard}
          setClipboard={setClipboard}
          copied={copied}
          refusal={refusal}
          transfers={transfers}
          listening={listening}
          microphone={() => {
            setRefusal("");
            handle.current?.microphone((status) => {
              setListening(status === 0);
              setRefusal(microphoneRefusal(status) ?? "");
            });
          }}
          send={() => {
            setRefusal("");
            handle.current?.sendClipboard(clipboard, (status) => setRefusal(pasteRefusal(status, policy) ?? ""));
          }}
          upload={(files) => {
            for (const file of files) {
              const id = ++uploads.current;
              handle.current?.upload(file, id, (upload) => {
                const message = upload.state === "refused" ? uploadRefusal(Number(upload.message), policy) : null;
                setTransfers((list) => updateTransfer(list, message ? { ...upload, message } : upload));
              });
            }
          }}
        />
      ) : null}
      <div
        className="desktop-screen"
        ref={screen}
        tabIndex={0}
        role="application"
        aria-label="Remote desktop: keyboard and mouse go to the desktop"
        onMouseEnter={() => screen.current?.focus()}
      />
      {!live ? (
        <div className="desktop-overlay" role="alert" data-status={code}>
          <p>
            <strong>{headline}</strong>
          </p>
          {ended ? (
            <>
              <p>{ended.advice}</p>
              <p>
                <small>Status {code} (for your administrator).</small>
              </p>
            </>
          ) : null}
          <button type="button" onClick={() => void connect()}>
            Reconnect
          </button>
        </div>
      ) : null}
    </div>
  );
}

/** The clipboard (type or paste for the desktop; what it copied) and files both ways. */
function TransferPanel(props: {
  policy: ClientPolicy | undefined;
  clipboard: string;
  setClipboard: (text: string) => void;
  copied: string;
  refusal: string;
  transfers: Transfer[];
  listening: boolean;
  microphone: () => void;
  send: () => void;
  upload: (files: File[]) => void;
}) {
  const notes = policyNotes(props.policy);
  const [dragging, setDragging] = useState(false);
  return (
    <section className="desktop-transfers" aria-label="Clipboard and files" data-testid="transfer-panel">
      <form
        className="desktop-clipboard"
        onSubmit={(event) => {
          event.preventDefault();
          props.send();
        }}
      >
        <label>
          Clipboard for the desktop (type or paste here)
          <textarea
            value={props.clipboard}
            onChange={(event) => props.setClipboard(event.target.value)}
            rows={3}
            disabled={Boolean(notes.paste)}
          />
        </label>
        <button type="submit" className="secondary" disabled={Boolean(notes.paste)}>
          Send to the desktop
        </button>
      </form>
      {notes.paste ? <p className="transfer-note" role="note">{notes.paste}</p> : null}
      {props.refusal ? <p className="transfer-refused" role="alert">{props.refusal}</p> : null}
      {notes.copy ? (
        <p className="transfer-note" role="note" data-testid="copy-off">{notes.copy}</p>
      ) : (
        <label className="desktop-copied">
          Copied on the desktop
          <output data-testid="desktop-copied">{props.copied || "Nothing yet."}</output>
        </label>
      )}
      {notes.upload ? (
        <p className="transfer-note" role="note">{notes.upload}</p>
      ) : (
        <label
          className={`drop-zone${dragging ? " dragging" : ""}`}
          onDragOver={(event) => {
            event.preventDefault();
            setDragging(true);
          }}
          onDragLeave={() => setDragging(false)}
          onDrop={(event) => {
            event.preventDefault();
            setDragging(false);
            props.upload([...event.dataTransfer.files]);
          }}
        >
          Send files to the desktop: choose them or drop them here
          <input
            type="file"
            multiple
            onChange={(event) => {
              props.upload([...(event.target.files ?? [])]);
              event.target.value = "";
            }}
          />
        </label>
      )}
      {notes.download ? <p className="transfer-note" role="note">{notes.download}</p> : null}
      {props.policy?.audio.microphone ? (
        props.listening ? (
          <p className="transfer-note" role="note">The desktop hears your microphone.</p>
        ) : (
          <button type="button" className="secondary" onClick={props.microphone}>
            Use the microphone
          </button>
        )
      ) : null}
      {props.transfers.length ? (
        <ul className="transfer-list" aria-label="Transfers">
          {props.transfers.map((transfer) => (
            <li key={transfer.id} data-state={transfer.state} data-direction={transfer.direction}>
              <span>{transfer.direction === "upload" ? "To the desktop" : "From the desktop"}: </span>
              {transfer.url ? (
                <a href={transfer.url} download={transfer.name}>
                  {transfer.name}
                </a>
              ) : (
                <strong>{transfer.name}</strong>
              )}{" "}
              <progress value={progressOf(transfer) ?? undefined} max={1} aria-label={`Progress of ${transfer.name}`} />{" "}
              <small>
                {formatBytes(transfer.done)}
                {transfer.state === "finished" ? " — done" : ""}
              </small>
              {transfer.message ? <p className="transfer-refused" role="alert">{transfer.message}</p> : null}
            </li>
          ))}
        </ul>
      ) : null}
    </section>
  );
}
