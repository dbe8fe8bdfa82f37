/** An API problem shown to the user: its `detail`, and the request id for support. */
import { ApiError, describeError } from "../api/problem";

export function ProblemAlert({ error }: { error: unknown }) {
  if (!error) return null;
  const requestId = error instanceof ApiError ? error.problem.request_id : undefined;
  const fieldCount = error instanceof ApiError ? (error.problem.errors?.length ?? 0) : 0;
  return (
    <div role="alert" className="problem">
      <strong>{error instanceof ApiError ? error.problem.title || "Request refused" : "Something went wrong"}</strong>
      <p>{describeError(error)}</p>
      {fieldCount ? <p>See the {fieldCount === 1 ? "field" : "fields"} marked below.</p> : null}
      {requestId ? <small>Request id {requestId}</small> : null}
    </div>
  );
}

/** The field errors of a 422, by field name (empty for any other error). */
export function fieldErrorsOf(error: unknown): Record<string, string> {
  return error instanceof ApiError ? error.fieldErrors() : {};
}
