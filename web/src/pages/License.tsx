/** The license: edition, status, limits and usage; install or remove a signed license. */
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useUnsavedDraft } from "../components/Unsaved";
import { useState, type FormEvent } from "react";
import { unwrap } from "../api/client";
import { can } from "../auth/permissions";
import { Badge } from "../components/Badge";
import { fieldErrorsOf, ProblemAlert } from "../components/Problem";
import { when, words } from "../format";
import { useSession } from "../session";

export function LicensePage() {
  const { api, me } = useSession();
  const client = useQueryClient();
  const [document, setDocument] = useState("");
  useUnsavedDraft(document);
  const license = useQuery({ queryKey: ["license"], queryFn: () => unwrap(api.GET("/api/v1/license")) });
  const install = useMutation({
    mutationFn: () => unwrap(api.PUT("/api/v1/license", { body: { document: document.trim() } })),
    onSuccess: () => {
      setDocument("");
      void client.invalidateQueries({ queryKey: ["license"] });
    },
  });
  const remove = useMutation({
    mutationFn: () => unwrap(api.DELETE("/api/v1/license")),
    onSuccess: () => void client.invalidateQueries({ queryKey: ["license"] }),
  });
  const state = license.data;
  const limits = (state?.limits ?? {}) as Record<string, unknown>;
  const usage = (state?.usage ?? {}) as Record<string, unknown>;
  const installed = state?.license as { licensee?: string; expires_at?: string; grace_ends_at?: string } | null;
  const submit = (event: FormEvent) => {
    event.preventDefault();
    install.mutate();
  };
  return (
    <section>
      <h1>License</h1>
      <ProblemAlert error={license.error ?? install.error ?? remove.error} />
      {state ? (
        <>
          <p>
            Edition <strong>{words(state.edition)}</strong> <Badge value={state.status} />
            {installed ? ` · licensed to ${installed.licensee ?? "—"}, expires ${when(installed.expires_at)}` : ""}
          </p>
          {state.reasons.length ? (
            <ul className="reasons">
              {state.reasons.map((reason) => (
                <li key={String(reason)}>{String(reason)}</li>
              ))}
            </ul>
          ) : null}
          <table>
            <caption className="visually-hidden">Limits and usage</caption>
            <thead>
              <tr>
                <th scope="col">Limit</th>
                <th scope="col">Allowed</th>
                <th scope="col">In use</th>
              </tr>
            </thead>
            <tbody>
              {Object.entries(limits).map(([name, value]) => (
                <tr key={name}>
                  <td>{words(name)}</td>
                  <td>{value === null ? "unlimited" : String(value)}</td>
                  <td>{usage[name] === undefined ? "—" : String(usage[name])}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </>
      ) : null}
      {can(me, "license:manage") ? (
        <>
          <form onSubmit={submit} aria-label="Install a license">
            <label htmlFor="license-document">Signed license document</label>
            <textarea
              id="license-document"
              rows={5}
              value={document}
              onChange={(event) => setDocument(event.target.value)}
              aria-invalid={fieldErrorsOf(install.error).document ? true : undefined}
            />
            {fieldErrorsOf(install.error).document ? (
              <small className="field-error">{fieldErrorsOf(install.error).document}</small>
            ) : null}
            <button type="submit" disabled={!document.trim()}>
              Install license
            </button>
          </form>
          {installed ? (
            <button
              type="button"
              className="contrast outline"
              onClick={() => window.confirm("Remove the license? The free edition's limits apply.") && remove.mutate()}
            >
              Remove license
            </button>
          ) : null}
        </>
      ) : null}
    </section>
  );
}
