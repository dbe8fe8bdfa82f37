/**
 * The schedule editor: name, time zone, weekly phases and exception dates, with a preview of a
 * week drawn from `POST /api/v1/schedule-preview` as the form changes, before anything is saved.
 *
 * The API's field errors (of saving, or of the preview while nothing was saved) appear under the
 * fields they concern. With only `schedules:read` the same form is shown read-only, with its preview.
 */
import { keepPreviousData, useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useUnsavedDraft } from "./Unsaved";
import { useEffect, useId, useMemo, useRef, useState, type FormEvent, type ReactNode } from "react";
import { unwrap, type Schemas } from "../api/client";
import { ApiError } from "../api/problem";
import { addDays, previewOption, previewSummary, weekStart, zonedMidnight } from "../schedules/chart";
import {
  bodyOf,
  browserZone,
  DAY_NAMES,
  DAYS,
  draftOf,
  exceptionDraftOf,
  isTimeZone,
  itemErrors,
  nestedErrors,
  phaseDraftOf,
  previewBodyOf,
  renamePhase,
  timeZones,
  type ExceptionDraft,
  type PhaseDraft,
  type ScheduleDraft,
  type SettingsDraft,
} from "../schedules/draft";
import { useSession } from "../session";
import { Chart } from "./Chart";
import { SelectField, TextField } from "./Field";
import { fieldErrorsOf, ProblemAlert } from "./Problem";

type Schedule = Schemas["Schedule"];

/** `value`, once it has stopped changing for `ms`. */
function useSettled<T>(value: T, ms: number): T {
  const [settled, setSettled] = useState(value);
  useEffect(() => {
    const timer = setTimeout(() => setSettled(value), ms);
    return () => clearTimeout(timer);
  }, [value, ms]);
  return settled;
}

function SettingsFields({
  value,
  onChange,
  errors,
}: {
  value: SettingsDraft;
  onChange: (patch: Partial<SettingsDraft>) => void;
  errors: Record<string, string>;
}) {
  const set = (field: keyof SettingsDraft) => (event: { target: { value: string } }) =>
    onChange({ [field]: event.target.value } as Partial<SettingsDraft>);
  return (
    <>
      <div className="grid">
        <TextField
          label="Ready desktops (min_ready)"
          type="number"
          min={0}
          value={value.min_ready}
          onChange={set("min_ready")}
          error={errors.min_ready}
          hint="Kept powered on and ready for users."
        />
        <SelectField label="Counted as" value={value.min_ready_unit} onChange={set("min_ready_unit")} error={errors.min_ready_unit}>
          <option value="count">desktops</option>
          <option value="percent">% of the pool's maximum size</option>
        </SelectField>
        <TextField
          label="Spare desktops"
          type="number"
          min={0}
          value={value.spare}
          onChange={set("spare")}
          error={errors.spare}
          hint="Free ready desktops on top of those in use."
        />
        <SelectField
          label="Idle desktops beyond those"
          value={value.idle}
          onChange={set("idle")}
          error={errors.idle}
          hint="Never one in use: it is left until its session ends."
        >
          <option value="keep">keep running</option>
          <option value="power_off">drain and power off</option>
        </SelectField>
      </div>
      <label>
        <input type="checkbox" checked={value.logoff} onChange={(event) => onChange({ logoff: event.target.checked })} />
        Warn and log off sessions after a wait
      </label>
      {errors.logoff ? <small className="field-error">{errors.logoff}</small> : null}
      {value.logoff ? (
        <div className="grid">
          <SelectField label="Sessions" value={value.logoff_scope} onChange={set("logoff_scope")} error={errors["logoff.scope"]}>
            <option value="disconnected">disconnected ones</option>
            <option value="idle">idle ones (disconnected or without input)</option>
          </SelectField>
          <TextField
            label="Wait (seconds)"
            type="number"
            min={0}
            value={value.logoff_wait}
            onChange={set("logoff_wait")}
            error={errors["logoff.wait_seconds"]}
            hint="From the warning to the log-off."
          />
          <TextField label="Message to users" value={value.logoff_message} onChange={set("logoff_message")} error={errors["logoff.message"]} />
        </div>
      ) : null}
    </>
  );
}

/** A phase or an exception: a framed group named after it, its own error, and its remove button. */
function Item({
  kind,
  index,
  name,
  error,
  onRemove,
  children,
}: {
  kind: "Phase" | "Exception";
  index: number;
  name: string;
  error?: string;
  /** None: read-only. */
  onRemove?: () => void;
  children: ReactNode;
}) {
  return (
    <fieldset className="schedule-item" data-testid={kind.toLowerCase()}>
      <legend>
        {kind} {index + 1}
        {name ? `: ${name}` : ""}
      </legend>
      {error ? <small className="field-error">{error}</small> : null}
      {children}
      {onRemove ? (
        <button type="button" className="secondary outline small" onClick={onRemove}>
          Remove {kind.toLowerCase()} {index + 1}
        </button>
      ) : null}
    </fieldset>
  );
}

function PhaseFields({
  index,
  phase,
  onChange,
  onRename,
  onRemove,
  errors,
  readOnly,
}: {
  index: number;
  phase: PhaseDraft;
  onChange: (patch: Partial<PhaseDraft>) => void;
  onRename: (name: string) => void;
  onRemove: () => void;
  errors: Record<string, string>;
  readOnly: boolean;
}) {
  const daysId = useId();
  const toggle = (day: PhaseDraft["days"][number]) =>
    onChange({ days: phase.days.includes(day) ? phase.days.filter((d) => d !== day) : [...phase.days, day] });
  return (
    <Item kind="Phase" index={index} name={phase.name} error={errors[""]} onRemove={readOnly ? undefined : onRemove}>
      <div className="grid">
        <TextField label="Name" value={phase.name} onChange={(event) => onRename(event.target.value)} error={errors.name} />
        <TextField
          label="Starts at"
          type="time"
          value={phase.start}
          onChange={(event) => onChange({ start: event.target.value })}
          error={errors.start}
          hint="Local time of the schedule's zone; in force until the next phase starts."
        />
      </div>
      <fieldset className="days" aria-describedby={errors.days ? `${daysId}-error` : undefined}>
        <legend>Starts on</legend>
        {DAYS.map((day) => (
          <label key={day}>
            <input type="checkbox" checked={phase.days.includes(day)} onChange={() => toggle(day)} aria-label={DAY_NAMES[day]} />
            <span aria-hidden="true">{day}</span>
          </label>
        ))}
        {errors.days ? (
          <small id={`${daysId}-error`} className="field-error">
            {errors.days}
          </small>
        ) : null}
      </fieldset>
      <SettingsFields value={phase} onChange={onChange} errors={errors} />
    </Item>
  );
}

function ExceptionFields({
  index,
  exception,
  phaseNames,
  onChange,
  onRemove,
  errors,
  readOnly,
}: {
  index: number;
  exception: ExceptionDraft;
  phaseNames: string[];
  onChange: (patch: Partial<ExceptionDraft>) => void;
  onRemove: () => void;
  errors: Record<string, string>;
  readOnly: boolean;
}) {
  return (
    <Item kind="Exception" index={index} name={exception.name} error={errors[""]} onRemove={readOnly ? undefined : onRemove}>
      <div className="grid">
        <TextField label="Name" value={exception.name} onChange={(event) => onChange({ name: event.target.value })} error={errors.name} />
        <TextField
          label="First day"
          type="date"
          value={exception.first}
          onChange={(event) => onChange({ first: event.target.value })}
          error={errors.first}
        />
        <TextField
          label="Last day"
          type="date"
          value={exception.last}
          onChange={(event) => onChange({ last: event.target.value })}
          error={errors.last}
          hint="Empty: the first day only. Whole days, midnight to midnight."
        />
      </div>
      <div className="grid">
        <SelectField
          label="Runs"
          value={exception.mode}
          onChange={(event) => onChange({ mode: event.target.value as ExceptionDraft["mode"] })}
          error={errors.settings}
        >
          <option value="phase">a phase of this schedule</option>
          <option value="own">settings of its own</option>
        </SelectField>
        {exception.mode === "phase" ? (
          <SelectField label="Phase" value={exception.phase} onChange={(event) => onChange({ phase: event.target.value })} error={errors.phase}>
            {phaseNames.includes(exception.phase) ? null : <option value={exception.phase}>{exception.phase || "Choose a phase"}</option>}
            {phaseNames.map((name) => (
              <option key={name} value={name}>
                {name}
              </option>
            ))}
          </SelectField>
        ) : null}
      </div>
      {exception.mode === "own" ? (
        <SettingsFields
          value={exception.settings}
          onChange={(patch) => onChange({ settings: { ...exception.settings, ...patch } })}
          errors={nestedErrors(errors, "settings")}
        />
      ) : null}
    </Item>
  );
}

/** The preview's period and pool size, and the targets the API computes for the draft. */
function usePreview(draft: ScheduleDraft) {
  const { api } = useSession();
  const zone = isTimeZone(draft.time_zone) ? draft.time_zone : "UTC";
  // Until the administrator picks a week, the current one in the schedule's zone: it follows the
  // zone as it is typed (at 23:30 UTC on a Sunday, Berlin's current week starts the next day).
  const [chosenWeek, setWeek] = useState<string | null>(null);
  const week = chosenWeek ?? weekStart(Date.now(), zone);
  const [maxSize, setMaxSize] = useState("10");
  const body = useMemo(() => {
    // While the date field is being changed (or emptied), the current week.
    const day = /^\d{4}-\d{2}-\d{2}$/.test(week) && !Number.isNaN(Date.parse(week)) ? week : weekStart(Date.now(), zone);
    const start = zonedMidnight(day, zone);
    const end = zonedMidnight(addDays(day, 7), zone);
    return {
      ...previewBodyOf(draft),
      from: new Date(start).toISOString(),
      to: new Date(end).toISOString(),
      max_size: /^\d+$/.test(maxSize.trim()) ? Number(maxSize) : (maxSize as unknown as number),
    };
  }, [draft, week, zone, maxSize]);
  const settled = useSettled(body, 400);
  const query = useQuery({
    queryKey: ["schedule-preview", JSON.stringify(settled)],
    enabled: isTimeZone(draft.time_zone),
    placeholderData: keepPreviousData,
    queryFn: () => unwrap(api.POST("/api/v1/schedule-preview", { body: settled })),
  });
  return {
    query,
    week,
    setWeek,
    maxSize,
    setMaxSize,
    zone,
    zoneMissing: !isTimeZone(draft.time_zone),
    start: Date.parse(settled.from),
    end: Date.parse(settled.to),
  };
}

const TABLE_TIME: Intl.DateTimeFormatOptions = { weekday: "short", day: "numeric", month: "short", hour: "2-digit", minute: "2-digit" };

function Preview({ preview, errors }: { preview: ReturnType<typeof usePreview>; errors: Record<string, string> }) {
  const { query, week, setWeek, maxSize, setMaxSize, zone, start, end, zoneMissing } = preview;
  const items = query.data?.items;
  const option = useMemo(() => (items ? previewOption(items, start, end, zone) : null), [items, start, end, zone]);
  const invalid = query.error instanceof ApiError && query.error.status === 422;
  return (
    <section aria-labelledby="preview-title" className="schedule-preview">
      <h2 id="preview-title">Preview of a week</h2>
      <div className="grid">
        <TextField label="Week from" type="date" value={week} onChange={(event) => setWeek(event.target.value)} error={errors.from} />
        <TextField
          label="For a pool of (maximum size)"
          type="number"
          min={1}
          value={maxSize}
          onChange={(event) => setMaxSize(event.target.value)}
          error={errors.max_size}
          hint="Percentages are taken of it."
        />
      </div>
      {invalid ? (
        <p className="error-text" role="status">
          The preview waits for the fields marked above.
        </p>
      ) : (
        <ProblemAlert error={query.error} />
      )}
      {option && items ? (
        <>
          <Chart option={option} label={previewSummary(items, start, zone)} height="18rem" testId="schedule-preview" />
          <details>
            <summary>The week as a table</summary>
            <table>
              <caption className="visually-hidden">Phases in force over the week</caption>
              <thead>
                <tr>
                  <th scope="col">From ({zone})</th>
                  <th scope="col">Phase</th>
                  <th scope="col">Ready</th>
                  <th scope="col">Spare</th>
                  <th scope="col">Idle desktops</th>
                </tr>
              </thead>
              <tbody>
                {items.map((item) => (
                  <tr key={item.since}>
                    <td>{new Date(item.since).toLocaleString(undefined, { timeZone: zone, ...TABLE_TIME })}</td>
                    <td>{item.exception && item.exception !== item.phase ? `${item.exception}: ${item.phase}` : (item.phase ?? "—")}</td>
                    <td className="num">{item.min_ready}</td>
                    <td className="num">{item.spare}</td>
                    <td>{item.idle === "power_off" ? "powered off" : "kept"}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </details>
        </>
      ) : query.isFetching ? (
        <p aria-busy="true">Computing the week…</p>
      ) : zoneMissing ? (
        <p>The preview needs the schedule's time zone.</p>
      ) : null}
    </section>
  );
}

export function ScheduleEditor({
  schedule,
  readOnly = false,
  onSaved,
}: {
  schedule?: Schedule;
  readOnly?: boolean;
  onSaved?: (schedule: Schedule) => void;
}) {
  const { api } = useSession();
  const client = useQueryClient();
  const [draft, setDraft] = useState<ScheduleDraft>(() => draftOf(schedule, browserZone()));
  const [zoneTouched, setZoneTouched] = useState(false);
  const zones = useMemo(() => timeZones(), []);
  const zonesId = useId();
  const preview = usePreview(draft);
  const save = useMutation({
    mutationFn: (body: Schemas["ScheduleInput"]) =>
      schedule
        ? unwrap(api.PUT("/api/v1/schedules/{schedule_id}", { params: { path: { schedule_id: schedule.id } }, body }))
        : unwrap(api.POST("/api/v1/schedules", { body })),
    onSuccess: (saved) => {
      void client.invalidateQueries({ queryKey: ["schedules"] });
      void client.invalidateQueries({ queryKey: ["capacity"] });
      onSaved?.(saved);
    },
  });
  useUnsavedDraft(draft, save.isSuccess || readOnly);
  // A refused save's problem is about the form as it was sent: an edit clears it (the preview's take over).
  const { isError: saveFailed, reset: resetSave } = save;
  const sent = useRef(draft);
  useEffect(() => {
    if (saveFailed && sent.current !== draft) resetSave();
  }, [draft, saveFailed, resetSave]);
  // Saving's errors; before any, the preview's (the same checks), so a mistake shows as it is made.
  const errors = save.error ? fieldErrorsOf(save.error) : fieldErrorsOf(preview.query.error);
  const zoneError = !isTimeZone(draft.time_zone) && (zoneTouched || save.isError)
    ? "Not a time zone: choose one of the list, such as Europe/Berlin."
    : errors.time_zone;
  const phaseNames = draft.phases.map((phase) => phase.name.trim()).filter(Boolean);
  const changePhase = (index: number, patch: Partial<PhaseDraft>) =>
    setDraft((current) => ({
      ...current,
      phases: current.phases.map((phase, at) => (at === index ? { ...phase, ...patch } : phase)),
    }));
  const changeException = (index: number, patch: Partial<ExceptionDraft>) =>
    setDraft((current) => ({
      ...current,
      exceptions: current.exceptions.map((exception, at) => (at === index ? { ...exception, ...patch } : exception)),
    }));
  const submit = (event: FormEvent) => {
    event.preventDefault();
    if (readOnly) return;
    if (!isTimeZone(draft.time_zone)) {
      setZoneTouched(true);
      return;
    }
    sent.current = draft;
    save.mutate(bodyOf(draft));
  };
  return (
    <form onSubmit={submit} noValidate aria-label={schedule ? `Schedule ${schedule.name}` : "New schedule"}>
      <ProblemAlert error={save.error} />
      <fieldset disabled={readOnly} className="plain">
        <div className="grid">
          <TextField
            label="Name"
            value={draft.name}
            onChange={(event) => setDraft({ ...draft, name: event.target.value })}
            error={errors.name}
            required
          />
          <TextField
            label="Time zone"
            value={draft.time_zone}
            list={zonesId}
            autoComplete="off"
            onChange={(event) => setDraft({ ...draft, time_zone: event.target.value })}
            onBlur={() => setZoneTouched(true)}
            error={zoneError}
            hint="IANA name; every time and date of the schedule is local to it."
          />
          <datalist id={zonesId}>
            {zones.map((zone) => (
              <option key={zone} value={zone} />
            ))}
          </datalist>
        </div>
        <h2>Weekly phases</h2>
        <p className="meta">
          A phase is in force from its start on each of its days until the next phase starts, which may be days later.
        </p>
        {errors.phases ? <p className="field-error">{errors.phases}</p> : null}
        {draft.phases.map((phase, index) => (
          <PhaseFields
            key={phase.key}
            index={index}
            phase={phase}
            onChange={(patch) => changePhase(index, patch)}
            onRename={(name) => setDraft((current) => renamePhase(current, index, name))}
            onRemove={() => setDraft((current) => ({ ...current, phases: current.phases.filter((_, at) => at !== index) }))}
            errors={itemErrors(errors, "phases", index)}
            readOnly={readOnly}
          />
        ))}
        {readOnly ? null : (
          <button
            type="button"
            className="secondary"
            onClick={() => setDraft((current) => ({ ...current, phases: [...current.phases, phaseDraftOf()] }))}
          >
            Add a phase
          </button>
        )}
        <h2>Exception dates</h2>
        <p className="meta">
          Holidays, a closed site, an exam day: whole days that run a phase of the schedule, or settings of their own,
          whatever the weekday. When exceptions overlap, the first listed wins.
        </p>
        {errors.exceptions ? <p className="field-error">{errors.exceptions}</p> : null}
        {draft.exceptions.map((exception, index) => (
          <ExceptionFields
            key={exception.key}
            index={index}
            exception={exception}
            phaseNames={phaseNames}
            onChange={(patch) => changeException(index, patch)}
            onRemove={() =>
              setDraft((current) => ({ ...current, exceptions: current.exceptions.filter((_, at) => at !== index) }))
            }
            errors={itemErrors(errors, "exceptions", index)}
            readOnly={readOnly}
          />
        ))}
        {!readOnly ? (
          <button
            type="button"
            className="secondary"
            onClick={() =>
              setDraft((current) => ({ ...current, exceptions: [...current.exceptions, exceptionDraftOf(undefined, current.phases)] }))
            }
          >
            Add an exception
          </button>
        ) : draft.exceptions.length ? null : (
          <p>No exception date.</p>
        )}
      </fieldset>
      <Preview preview={preview} errors={errors} />
      {readOnly ? null : (
        <button type="submit" aria-busy={save.isPending}>
          {schedule ? "Save the schedule" : "Create the schedule"}
        </button>
      )}
    </form>
  );
}
