/**
 * The fields a hypervisor driver declares (`GET /api/v1/drivers`), as form inputs.
 *
 * Credentials (`secret: true`) are write-only: their inputs start empty, a `secret` kind is a
 * password input, and when a cluster is edited an empty credential keeps the stored ones.
 * Options start from the cluster's value or the declared default; only values that differ
 * from the default are sent. A secret option (`sealed`, or the `sealed_keys` of a `json` one)
 * is never shown back: its input starts empty, and when a cluster is edited an empty one keeps
 * the stored value (the API keeps what the options leave out). Errors are keyed like the API's
 * field errors (`credentials.token_id`, `options.nodes`), so a 422 lands next to its field.
 */
import type { ReactNode } from "react";
import type { Schemas } from "../api/client";
import { SelectField, TextAreaField, TextField } from "./Field";

export type ConnectionField = Schemas["ConnectionField"];
export type Driver = Schemas["Driver"];
/** What the inputs hold: text for every kind but `boolean`. */
export type FieldValues = Record<string, string | boolean>;

/** The error key of a field: its API pointer as a dotted name. */
export function errorKey(field: ConnectionField): string {
  return `${field.secret ? "credentials" : "options"}.${field.name}`;
}

function asText(field: ConnectionField, value: unknown): string {
  if (value === null || value === undefined) return "";
  if (field.kind === "list" && Array.isArray(value)) return value.map(String).join("\n");
  if (field.kind === "json") return JSON.stringify(value, null, 2);
  return String(value);
}

/** The inputs' starting values: nothing for credentials, the stored value or the default. */
export function initialValues(fields: ConnectionField[], options: Record<string, unknown> = {}): FieldValues {
  const values: FieldValues = {};
  for (const field of fields) {
    const value = field.secret ? undefined : field.name in options ? options[field.name] : field.default;
    values[field.name] = field.kind === "boolean" ? value === true : asText(field, value);
  }
  return values;
}

type Parsed = { ok: true; value: unknown } | { ok: false; error: string };

function parse(field: ConnectionField, text: string): Parsed {
  switch (field.kind) {
    case "integer":
      return /^-?\d+$/.test(text) ? { ok: true, value: Number(text) } : { ok: false, error: "Must be an integer." };
    case "number": {
      const value = Number(text);
      return Number.isFinite(value) ? { ok: true, value } : { ok: false, error: "Must be a number." };
    }
    case "list":
      return {
        ok: true,
        value: text
          .split(/[\n,]/)
          .map((item) => item.trim())
          .filter(Boolean),
      };
    case "json":
      try {
        return { ok: true, value: JSON.parse(text) as unknown };
      } catch {
        return { ok: false, error: "Must be JSON." };
      }
    default:
      return { ok: true, value: field.secret || field.kind === "secret" ? text : text.trim() };
  }
}

function sameValue(a: unknown, b: unknown): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}

export interface Collected {
  /** Absent when editing and no credential was typed: the stored ones stay. */
  credentials?: Record<string, string>;
  options: Record<string, unknown>;
  /** Inputs the console could not read, by error key; nothing is sent while there are any. */
  errors: Record<string, string>;
}

/** The request members the inputs make. */
export function collect(fields: ConnectionField[], values: FieldValues, editing = false): Collected {
  const credentials: Record<string, string> = {};
  const options: Record<string, unknown> = {};
  const errors: Record<string, string> = {};
  for (const field of fields) {
    const raw = values[field.name];
    if (field.kind === "boolean") {
      const checked = raw === true;
      if (!sameValue(checked, field.default ?? false) || field.required) options[field.name] = checked;
      continue;
    }
    const text = typeof raw === "string" ? raw : "";
    if (!text.trim()) continue;
    const parsed = parse(field, text);
    if (!parsed.ok) {
      errors[errorKey(field)] = parsed.error;
    } else if (field.secret) {
      credentials[field.name] = String(parsed.value);
    } else if (!sameValue(parsed.value, field.default) || field.required) {
      options[field.name] = parsed.value;
    }
  }
  const typed = Object.keys(credentials).length > 0;
  return { credentials: editing && !typed ? undefined : credentials, options, errors };
}

function Hint({ field, editing }: { field: ConnectionField; editing: boolean }): ReactNode {
  const parts = [field.help];
  if (field.kind === "list") parts.push("One per line.");
  if (field.secret && editing) parts.push("Leave empty to keep the stored credentials.");
  if (field.sealed && editing) parts.push("Write-only: leave empty to keep the stored value.");
  if (field.sealed_keys.length) parts.push(`Write-only keys (never shown back): ${field.sealed_keys.join(", ")}.`);
  return parts.filter(Boolean).join(" ") || undefined;
}

function FieldInput({
  field,
  value,
  onChange,
  error,
  editing,
}: {
  field: ConnectionField;
  value: string | boolean;
  onChange: (value: string | boolean) => void;
  error?: string;
  editing: boolean;
}) {
  const hint = Hint({ field, editing });
  const text = typeof value === "string" ? value : "";
  const placeholder = (field.secret || field.sealed) && editing ? "leave empty to keep" : field.placeholder || undefined;
  switch (field.kind) {
    case "boolean":
      return (
        <div className="field">
          <label>
            <input
              type="checkbox"
              role="switch"
              checked={value === true}
              onChange={(event) => onChange(event.target.checked)}
              aria-invalid={error ? true : undefined}
            />{" "}
            {field.label}
          </label>
          {hint ? <small>{hint}</small> : null}
          {error ? <small className="field-error">{error}</small> : null}
        </div>
      );
    case "choice":
      return (
        <SelectField label={field.label} value={text} onChange={(e) => onChange(e.target.value)} error={error} hint={hint}>
          {field.required ? null : <option value="">(default)</option>}
          {field.choices.map((choice) => (
            <option key={choice} value={choice}>
              {choice}
            </option>
          ))}
        </SelectField>
      );
    case "list":
    case "json":
      return (
        <TextAreaField
          label={field.label}
          value={text}
          onChange={(e) => onChange(e.target.value)}
          error={error}
          hint={hint}
          placeholder={placeholder}
        />
      );
    default: {
      const numeric = field.kind === "integer" || field.kind === "number";
      return (
        <TextField
          label={field.label}
          type={field.kind === "secret" ? "password" : field.kind === "url" ? "url" : numeric ? "number" : "text"}
          autoComplete={field.kind === "secret" ? "new-password" : "off"}
          inputMode={numeric ? "decimal" : undefined}
          step={field.kind === "integer" ? 1 : numeric ? "any" : undefined}
          min={field.minimum ?? undefined}
          max={field.maximum ?? undefined}
          required={field.required && !(field.secret && editing)}
          placeholder={placeholder}
          value={text}
          onChange={(e) => onChange(e.target.value)}
          error={error}
          hint={hint}
        />
      );
    }
  }
}

/** The inputs of a driver's fields: credentials first, then options. */
export function DriverFields({
  driver,
  values,
  onChange,
  errors,
  editing = false,
}: {
  driver: Driver;
  values: FieldValues;
  onChange: (name: string, value: string | boolean) => void;
  errors: Record<string, string>;
  editing?: boolean;
}) {
  const groups = [
    { legend: "Credentials (write-only: sealed at rest, never shown again)", fields: driver.fields.filter((f) => f.secret) },
    { legend: `${driver.title} options`, fields: driver.fields.filter((f) => !f.secret) },
  ];
  return (
    <>
      {groups.map((group) => {
        if (!group.fields.length) return null;
        const inputs = group.fields.map((field) => (
          <FieldInput
            key={field.name}
            field={field}
            value={values[field.name] ?? ""}
            onChange={(value) => onChange(field.name, value)}
            error={errors[errorKey(field)]}
            editing={editing}
          />
        ));
        // Options that all have defaults fold away; a required one or an error unfolds them.
        const foldable = group.fields.every((field) => !field.secret && !field.required);
        if (!foldable) {
          return (
            <fieldset key={group.legend}>
              <legend>{group.legend}</legend>
              {inputs}
            </fieldset>
          );
        }
        const failed = group.fields.some((field) => errors[errorKey(field)]);
        return (
          <details key={group.legend} open={failed || undefined}>
            <summary>{group.legend} (optional: each has a default)</summary>
            {inputs}
          </details>
        );
      })}
    </>
  );
}
