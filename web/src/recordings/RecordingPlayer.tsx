/**
 * The player of one session recording: the display, play/pause, a timeline to seek on, the
 * speed, the position and duration, and a button to save the recording as a file.
 *
 * The recording is downloaded once with the bearer token (`GET /recordings/{id}/download`,
 * audited as `recording.download`) and played from memory; saving it reuses that copy.
 */
import { useEffect, useRef, useState } from "react";
import { ApiError, problemFrom } from "../api/problem";
import { ProblemAlert } from "../components/Problem";
import { useSession } from "../session";
import type { PlaybackHandle, PlaybackState } from "./playback";
import { SPEEDS, clockText, type Speed } from "./player";

interface Props {
  recordingId: string;
}

async function download(url: string, token: string | null): Promise<Blob> {
  const response = await fetch(url, { headers: token ? { Authorization: `Bearer ${token}` } : {} });
  if (!response.ok) {
    const body: unknown = await response.json().catch(() => null);
    throw new ApiError(problemFrom(response.status, body, response.statusText));
  }
  return response.blob();
}

export function RecordingPlayer({ recordingId }: Props) {
  const { config, getToken } = useSession();
  const token = useRef(getToken);
  token.current = getToken;
  const screen = useRef<HTMLDivElement>(null);
  const handle = useRef<PlaybackHandle | null>(null);
  const [blob, setBlob] = useState<Blob | null>(null);
  const [failure, setFailure] = useState<unknown>(null);
  const [state, setState] = useState<PlaybackState | null>(null);

  useEffect(() => {
    let gone = false;
    setBlob(null);
    setFailure(null);
    setState(null);
    const url = `${config.apiBaseUrl.replace(/\/+$/, "")}/api/v1/recordings/${encodeURIComponent(recordingId)}/download`;
    (async () => {
      try {
        const data = await download(url, await token.current());
        if (gone || !screen.current) return;
        setBlob(data);
        const { openRecording } = await import("./playback");
        if (gone || !screen.current) return;
        const opened = await openRecording(screen.current, data, (next) => {
          if (!gone) setState(next);
        });
        if (gone) opened.destroy();
        else handle.current = opened;
      } catch (error) {
        if (!gone) setFailure(error);
      }
    })();
    return () => {
      gone = true;
      handle.current?.destroy();
      handle.current = null;
    };
  }, [recordingId, config.apiBaseUrl]);

  const save = () => {
    if (!blob) return;
    const link = document.createElement("a");
    link.href = URL.createObjectURL(blob);
    link.download = `${recordingId}.guac`;
    link.click();
    window.setTimeout(() => URL.revokeObjectURL(link.href), 10_000);
  };

  const ready = state !== null && state.duration >= 0 && !state.error;
  const position = state?.position ?? 0;
  const duration = state?.duration ?? 0;
  return (
    <div className="recording-player">
      <ProblemAlert error={failure} />
      {state?.error ? (
        <p role="alert" className="field-error">
          The recording cannot be played: {state.error}
        </p>
      ) : null}
      <div
        ref={screen}
        className="recording-screen"
        role="img"
        aria-label="Session recording"
        aria-busy={(!state && !failure) || (state?.seeking && !state.playing) ? "true" : undefined}
      />
      <div className="recording-controls">
        {state?.playing ? (
          <button type="button" onClick={() => handle.current?.pause()}>
            Pause
          </button>
        ) : (
          <button type="button" disabled={!ready || duration <= 0} onClick={() => handle.current?.play()}>
            Play
          </button>
        )}
        <input
          type="range"
          aria-label="Position"
          min={0}
          max={Math.max(duration, 0)}
          step="any"
          value={Math.min(position, duration)}
          disabled={!ready}
          onChange={(event) => handle.current?.seek(Number(event.target.value))}
        />
        <output aria-label="Position and duration" className="recording-time">
          {clockText(position)} / {clockText(duration)}
          {state && !state.loaded ? " (loading)" : ""}
        </output>
        <label className="recording-speed">
          Speed{" "}
          <select
            value={state?.speed ?? 1}
            disabled={!ready}
            onChange={(event) => handle.current?.setSpeed(Number(event.target.value) as Speed)}
          >
            {SPEEDS.map((speed) => (
              <option key={speed} value={speed}>
                {speed}×
              </option>
            ))}
          </select>
        </label>
        <button type="button" className="secondary outline" disabled={!blob} onClick={save}>
          Save as file
        </button>
      </div>
    </div>
  );
}
