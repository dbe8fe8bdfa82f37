/** The outcome of checking a cluster connection. */
import type { Schemas } from "../api/client";

export function CheckResultView({ result }: { result: Schemas["CheckResult"] }) {
  const error = result.error as { code?: string; detail?: string } | null | undefined;
  return result.ok ? (
    <p role="status" className="ok-text">
      Connected to {result.product ?? "the cluster"} {result.version ?? ""}
      {result.cluster_name ? ` (${result.cluster_name})` : ""} in {result.duration_seconds.toFixed(2)} s.
    </p>
  ) : (
    <p role="alert" className="error-text">
      The check failed{error?.code ? ` (${error.code})` : ""}: {error?.detail ?? "no detail"}
    </p>
  );
}
