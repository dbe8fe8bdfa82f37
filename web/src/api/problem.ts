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

  /** Field errors by field path ("name", "tls/ca_pem"): what a form shows next to its fields. */
  fieldErrors(): Record<string, string> {
    return fieldErrorsByName(this.problem.errors ?? []);
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
    result[name] = result[name] ? `${result[name]} ${error.detail}` : error.detail;
  }
  return result;
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
