/**
 * The pure parts of the recordings page: the list's filters as the API's query, the player's
 * clock (play, pause, seek and speed over a recording's timeline) and how positions read.
 *
 * guacamole-common-js's `Guacamole.SessionRecording` plays at the recorded pace only; the
 * player drives it with its own clock instead, seeking to the clock's position as it advances
 * (a seek forward replays the frames in between), so 2x and 4x play every frame too.
 */

/** The playback speeds offered. */
export const SPEEDS = [1, 2, 4] as const;
export type Speed = (typeof SPEEDS)[number];

/** `m:ss`, or `h:mm:ss` from an hour on, of a position in milliseconds. */
export function clockText(milliseconds: number): string {
  const total = Math.max(0, Math.floor(milliseconds / 1000));
  const hours = Math.floor(total / 3600);
  const minutes = Math.floor((total % 3600) / 60);
  const seconds = String(total % 60).padStart(2, "0");
  return hours ? `${hours}:${String(minutes).padStart(2, "0")}:${seconds}` : `${minutes}:${seconds}`;
}

/**
 * Where a recording is at, given when it was last anchored: paused, a position; playing, the
 * anchored position advanced by the time since, times the speed, up to the duration.
 */
export class PlaybackClock {
  private anchorPosition = 0;
  private anchorTime = 0;
  private running = false;
  private rate: Speed = 1;

  constructor(private length = 0) {}

  get playing(): boolean {
    return this.running;
  }

  get speed(): Speed {
    return this.rate;
  }

  get duration(): number {
    return this.length;
  }

  /** The position at `now` (milliseconds, both). */
  position(now: number): number {
    const moved = this.running ? (now - this.anchorTime) * this.rate : 0;
    return Math.min(this.length, Math.max(0, this.anchorPosition + moved));
  }

  /** Whether playing reached the end at `now` (the caller pauses then). */
  ended(now: number): boolean {
    return this.length > 0 && this.position(now) >= this.length;
  }

  /** The recording is known up to `duration` (it grows while it loads). */
  setDuration(duration: number, now: number): void {
    this.rebase(now);
    this.length = Math.max(0, duration);
  }

  /** Start playing at `now` (from the start again when at the end). */
  play(now: number): void {
    if (this.running) return;
    if (this.ended(now)) this.anchorPosition = 0;
    this.anchorTime = now;
    this.running = this.length > 0;
  }

  pause(now: number): void {
    this.rebase(now);
    this.running = false;
  }

  /** Jump to `position` (clamped to the recording), playing on if it was. */
  seek(position: number, now: number): void {
    this.anchorPosition = Math.min(this.length, Math.max(0, position));
    this.anchorTime = now;
  }

  setSpeed(speed: Speed, now: number): void {
    this.rebase(now);
    this.rate = speed;
  }

  private rebase(now: number): void {
    this.anchorPosition = this.position(now);
    this.anchorTime = now;
  }
}

/** The list's filters as the page holds them (the inputs' values). */
export interface RecordingFilters {
  pool_id: string;
  user_id: string;
  session_id: string;
  /** `datetime-local` values, in the browser's time zone. */
  since: string;
  until: string;
}

export const NO_FILTERS: RecordingFilters = { pool_id: "", user_id: "", session_id: "", since: "", until: "" };

/** The API's query of `GET /api/v1/recordings`, and the inputs that cannot be sent as they are. */
export interface RecordingQuery {
  query: { pool_id?: string; user_id?: string; session_id?: string; since?: string; until?: string };
  errors: Partial<Record<keyof RecordingFilters, string>>;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** An instant of a `datetime-local` value as an ISO 8601 time with its offset (UTC). */
export function instant(local: string): string | null {
  if (!/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?$/.test(local)) return null;
  const date = new Date(local); // a date-time without an offset is local time
  return Number.isNaN(date.getTime()) ? null : date.toISOString();
}

/** The query for `filters`: what is filled and well formed; what is not, as errors. */
export function recordingQuery(filters: RecordingFilters): RecordingQuery {
  const query: RecordingQuery["query"] = {};
  const errors: RecordingQuery["errors"] = {};
  for (const key of ["pool_id", "user_id", "session_id"] as const) {
    const value = filters[key].trim();
    if (!value) continue;
    if (UUID.test(value)) query[key] = value.toLowerCase();
    else errors[key] = "Not an id (a UUID).";
  }
  for (const key of ["since", "until"] as const) {
    if (!filters[key]) continue;
    const value = instant(filters[key]);
    if (value) query[key] = value;
    else errors[key] = "Not a date and time.";
  }
  if (query.since && query.until && query.since >= query.until) errors.until = "Must be after From.";
  if (errors.until && query.until) delete query.until;
  return { query, errors };
}

/** How long a recording lasts in seconds (`null` while it is recorded). */
export function recordedSeconds(startedAt: string, endedAt: string | null | undefined): number | null {
  if (!endedAt) return null;
  const seconds = (Date.parse(endedAt) - Date.parse(startedAt)) / 1000;
  return Number.isFinite(seconds) ? Math.max(0, seconds) : null;
}
