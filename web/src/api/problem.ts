/** Problems (RFC 9457 problem+json) as the console shows them. */

export interface FieldError {
  pointer: string;
  detail: string;
  location?: "body" | "query";
}

export interface ProblemBody {
  type?: string;
  title?: string;
  status: number;
  detail?: string;
  code?: string;
  request_id?: string;
  errors?: FieldError[];
  [key: string]: unknown;
}

/** The field a conflict is about, by its code (`*_name_taken` is the name's). */
const CONFLICT_FIELDS: Record<string, string> = { user_exists: "subject" };

/** An API call that did not succeed, carrying the problem the API answered. */
export class ApiError extends Error {
  readonly status: number;
  readonly problem: ProblemBody;

  constructor(problem: ProblemBody) {
    super(problem.detail || problem.title || `The API answered ${problem.status}.`);
    this.name = "ApiError";
    this.status = problem.status;
    this.problem = problem;
  }

  /**
   * Field errors by field path ("name", "tls/ca_pem"), in words: what a form shows next to its
   * fields. A name taken (409 `*_name_taken`) is the name field's error, a subject taken
   * (`user_exists`) the subject's.
   */
  fieldErrors(): Record<string, string> {
    const errors = fieldErrorsByName(this.problem.errors ?? []);
    const code = this.problem.code ?? "";
    const field = code.endsWith("_name_taken") ? "name" : CONFLICT_FIELDS[code];
    if (field && !errors[field]) errors[field] = this.problem.detail ?? "This is taken.";
    return errors;
  }
}

/** `/name` → `name`, `/tls/ca_pem` → `tls.ca_pem`, `/query/limit` → `limit`. */
export function fieldName(error: FieldError): string {
  const parts = error.pointer
    .split("/")
    .slice(1)
    .map((part) => part.replace(/~1/g, "/").replace(/~0/g, "~"));
  if (error.location === "query" && parts[0] === "query") parts.shift();
  return parts.join(".");
}

export function fieldErrorsByName(errors: FieldError[]): Record<string, string> {
  const result: Record<string, string> = {};
  for (const error of errors) {
    const name = fieldName(error);
    const detail = inWords(error.detail);
    result[name] = result[name] ? `${result[name]} ${detail}` : detail;
  }
  return result;
}

/** The API's schema messages, as a person would say them next to the field. */
const SCHEMA_WORDS: Array<[RegExp, (match: RegExpMatchArray) => string]> = [
  [/^Not a valid UUID\.$/, () => "Choose one from the list."],
  [/^(Missing data for required field|Field may not be null)\.$/, () => "Fill this in."],
  [/^Length must be between (\d+) and (\d+)\.$/, (m) => `Use ${m[1]} to ${m[2]} characters.`],
  [/^Shorter than minimum length (\d+)\.$/, (m) => `Use at least ${m[1]} characters.`],
  [/^Longer than maximum length (\d+)\.$/, (m) => `Use at most ${m[2] ?? m[1]} characters.`],
  [/^Not a valid integer\.$/, () => "Give a whole number."],
  [/^Not a valid (number|float)\.$/, () => "Give a number."],
  [/^Not a valid boolean\.$/, () => "Choose yes or no."],
  [/^Not a valid (datetime|date)\.$/, () => "Give a date and time."],
  [/^Must be greater than or equal to (-?[\d.]+) and less than or equal to (-?[\d.]+)\.$/, (m) => `Give a number from ${m[1]} to ${m[2]}.`],
  [/^Must be greater than or equal to (-?[\d.]+)\.$/, (m) => `Give ${m[1]} or more.`],
  [/^Must be less than or equal to (-?[\d.]+)\.$/, (m) => `Give ${m[1]} or less.`],
  [/^Must be one of: (.*)\.$/, (m) => `Choose one of: ${m[1]!.replace(/_/g, " ")}.`],
  [/^String does not match expected pattern\.$/, () => "Use no control characters and no spaces at either end."],
  [/^Unknown field\.$/, () => "This setting is not known to the API."],
];

/**
 * One field error in words: a schema message replaced by a sentence, a bare rule ("must be at
 * least 1") made a sentence, field keys ("max_size") said as words ("max size").
 */
export function inWords(detail: string): string {
  for (const [pattern, say] of SCHEMA_WORDS) {
    const match = detail.match(pattern);
    if (match) return say(match);
  }
  let text = detail.replace(/\b([a-z]+(?:_[a-z]+)+)\b/g, (key) => key.replace(/_/g, " "));
  if (/^(must|should|is|are|may|cannot|node|exceeds)\b/.test(text)) text = `It ${text}`;
  text = text.charAt(0).toUpperCase() + text.slice(1);
  return /[.!?)]$/.test(text) ? text : `${text}.`;
}

/** Build the problem of a response whose body may or may not be problem+json. */
export function problemFrom(status: number, body: unknown, statusText = ""): ProblemBody {
  if (body && typeof body === "object" && "status" in body) {
    return body as ProblemBody;
  }
  return {
    status,
    title: statusText || `HTTP ${status}`,
    detail: typeof body === "string" && body ? body.slice(0, 300) : `The API answered ${status}.`,
  };
}

/** The sentence to show for any error. */
export function describeError(error: unknown): string {
  if (error instanceof ApiError) return error.problem.detail || error.message;
  if (error instanceof Error) return error.message;
  return String(error);
}
