/**
 * The schedule editor's form state and the API's schedule body, both ways (pure).
 *
 * The form keeps what the user typed as strings (a number field may hold anything while it is
 * edited); {@link bodyOf} turns it into a `ScheduleInput`. A number that is not a whole number
 * is sent as typed, so the API's 422 names the field and the form shows it there.
 */
import type { Schemas } from "../api/client";

type Schedule = Schemas["Schedule"];
type ScheduleInput = Schemas["ScheduleInput"];
type Phase = Schemas["Phase"];
type PhaseSettings = Schemas["PhaseSettings"];
type ScheduleException = Schemas["ScheduleException"];

export type Day = Phase["days"][number];
export const DAYS: readonly Day[] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];
export const DAY_NAMES: Record<Day, string> = {
  mon: "Monday",
  tue: "Tuesday",
  wed: "Wednesday",
  thu: "Thursday",
  fri: "Friday",
  sat: "Saturday",
  sun: "Sunday",
};

/** What a phase (or an exception with settings of its own) asks of a pool, as typed. */
export interface SettingsDraft {
  min_ready: string;
  min_ready_unit: "count" | "percent";
  spare: string;
  idle: "keep" | "power_off";
  /** Whether the phase warns and logs off sessions (its `logoff`). */
  logoff: boolean;
  logoff_scope: "disconnected" | "idle";
  logoff_wait: string;
  logoff_message: string;
}

export interface PhaseDraft extends SettingsDraft {
  /** A key for React lists, never sent. */
  key: string;
  name: string;
  days: Day[];
  /** HH:MM. */
  start: string;
}

export interface ExceptionDraft {
  key: string;
  name: string;
  /** YYYY-MM-DD. */
  first: string;
  /** YYYY-MM-DD, or empty: the first day only. */
  last: string;
  /** Run a phase of the schedule, or settings of its own. */
  mode: "phase" | "own";
  phase: string;
  settings: SettingsDraft;
}

export interface ScheduleDraft {
  name: string;
  time_zone: string;
  phases: PhaseDraft[];
  exceptions: ExceptionDraft[];
}

let counter = 0;
function nextKey(): string {
  counter += 1;
  return `k${counter}`;
}

export function settingsDraftOf(settings?: PhaseSettings | null): SettingsDraft {
  return {
    min_ready: String(settings?.min_ready ?? 0),
    min_ready_unit: settings?.min_ready_unit ?? "count",
    spare: String(settings?.spare ?? 0),
    idle: settings?.idle ?? "keep",
    logoff: Boolean(settings?.logoff),
    logoff_scope: settings?.logoff?.scope ?? "disconnected",
    logoff_wait: String(settings?.logoff?.wait_seconds ?? 900),
    logoff_message: settings?.logoff?.message ?? "",
  };
}

export function phaseDraftOf(phase?: Phase): PhaseDraft {
  return {
    key: nextKey(),
    name: phase?.name ?? "",
    days: phase ? [...phase.days] : ["mon", "tue", "wed", "thu", "fri"],
    start: phase?.start ?? "07:00",
    ...settingsDraftOf(phase),
  };
}

export function exceptionDraftOf(exception?: ScheduleException, phases: PhaseDraft[] = []): ExceptionDraft {
  return {
    key: nextKey(),
    name: exception?.name ?? "",
    first: exception?.first ?? "",
    last: exception?.last && exception.last !== exception.first ? exception.last : "",
    mode: exception && !exception.phase ? "own" : "phase",
    phase: exception?.phase ?? phases[0]?.name ?? "",
    settings: settingsDraftOf(exception?.settings),
  };
}

/** The form of a schedule; a new schedule starts with a peak and an off-peak phase on working days. */
export function draftOf(schedule?: Schedule, zone = "UTC"): ScheduleDraft {
  if (!schedule) {
    return {
      name: "",
      time_zone: zone,
      phases: [
        phaseDraftOf({ name: "peak", days: ["mon", "tue", "wed", "thu", "fri"], start: "07:00", min_ready: 2, spare: 1 }),
        phaseDraftOf({
          name: "off-peak",
          days: ["mon", "tue", "wed", "thu", "fri"],
          start: "19:00",
          min_ready: 0,
          spare: 0,
          idle: "power_off",
        }),
      ],
      exceptions: [],
    };
  }
  const phases = schedule.phases.map((phase) => phaseDraftOf(phase));
  return {
    name: schedule.name,
    time_zone: schedule.time_zone,
    phases,
    exceptions: schedule.exceptions.map((exception) => exceptionDraftOf(exception, phases)),
  };
}

/** A whole number as typed becomes a number; anything else is sent as typed, for the API to name. */
function whole(value: string): number {
  const trimmed = value.trim();
  return /^-?\d+$/.test(trimmed) ? Number(trimmed) : (trimmed as unknown as number);
}

export function settingsOf(draft: SettingsDraft): PhaseSettings {
  return {
    min_ready: whole(draft.min_ready),
    min_ready_unit: draft.min_ready_unit,
    spare: whole(draft.spare),
    idle: draft.idle,
    logoff: draft.logoff
      ? { scope: draft.logoff_scope, wait_seconds: whole(draft.logoff_wait), message: draft.logoff_message }
      : null,
  };
}

/** The request body of the form (POST or PUT /api/v1/schedules). */
export function bodyOf(draft: ScheduleDraft): ScheduleInput {
  return {
    name: draft.name.trim(),
    time_zone: draft.time_zone.trim(),
    phases: draft.phases.map((phase) => ({
      name: phase.name.trim(),
      // In the week's order, whatever order they were ticked in.
      days: DAYS.filter((day) => phase.days.includes(day)),
      start: phase.start,
      ...settingsOf(phase),
    })),
    exceptions: draft.exceptions.map((exception) => ({
      name: exception.name.trim(),
      first: exception.first,
      last: exception.last || null,
      ...(exception.mode === "phase"
        ? { phase: exception.phase, settings: null }
        : { phase: null, settings: settingsOf(exception.settings) }),
    })),
  };
}

/**
 * The schedule part of a preview's body: the form as it is, but a schedule is previewed before
 * it has a name, and an exception before it has a date (it is left out until then), so the
 * preview's field errors are about what was typed, not what is still to type.
 */
export function previewBodyOf(draft: ScheduleDraft): ScheduleInput {
  const body = bodyOf(draft);
  return {
    ...body,
    name: body.name || "preview",
    exceptions: (body.exceptions ?? []).filter((exception) => exception.first),
  };
}

/** Rename a phase, and the exceptions that run it by name with it. */
export function renamePhase(draft: ScheduleDraft, index: number, name: string): ScheduleDraft {
  const before = draft.phases[index]?.name;
  return {
    ...draft,
    phases: draft.phases.map((phase, at) => (at === index ? { ...phase, name } : phase)),
    exceptions: draft.exceptions.map((exception) =>
      exception.mode === "phase" && before && exception.phase === before ? { ...exception, phase: name } : exception,
    ),
  };
}

/** The IANA time zones the browser knows, for the zone field's suggestions. */
export function timeZones(): string[] {
  const known = typeof Intl.supportedValuesOf === "function" ? Intl.supportedValuesOf("timeZone") : [];
  return [...new Set([...known, "UTC"])].sort();
}

/** The browser's time zone, the one a new schedule starts in. */
export function browserZone(): string {
  return Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC";
}

/** Whether `name` is a time zone name (not an offset) the browser accepts; the API has the last word. */
export function isTimeZone(name: string): boolean {
  if (!name || name !== name.trim() || /^[+-]/.test(name)) return false;
  try {
    new Intl.DateTimeFormat("en", { timeZone: name });
    return true;
  } catch {
    return false;
  }
}

/** The field errors below `prefix` (`settings`), by the rest of their name; `prefix`'s own is `""`. */
export function nestedErrors(errors: Record<string, string>, prefix: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, detail] of Object.entries(errors)) {
    if (name !== prefix && !name.startsWith(`${prefix}.`)) continue;
    const rest = name.slice(prefix.length + 1);
    // A day's own error (`days.3`) is shown at the days.
    const key = /^days\.\d+$/.test(rest) ? "days" : rest;
    out[key] = out[key] ? `${out[key]} ${detail}` : detail;
  }
  return out;
}

/**
 * The API's field errors that concern one item of a list (`phases.2.…`), by the rest of their
 * name (`min_ready`, `logoff.wait_seconds`; the item itself is `""`).
 */
export function itemErrors(errors: Record<string, string>, list: string, index: number): Record<string, string> {
  return nestedErrors(errors, `${list}.${index}`);
}
