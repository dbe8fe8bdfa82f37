/** Connect a cluster: an installed driver, its endpoint, credentials (write-only) and options. */
import { useMutation, useQueryClient } from "@tanstack/react-query";
import { useState, type FormEvent } from "react";
import { unwrap, type Schemas } from "../api/client";
import { useSession } from "../session";
import { SelectField, TextField } from "./Field";
import { fieldErrorsOf, ProblemAlert } from "./Problem";

type Cluster = Schemas["Cluster"];

interface Secret {
  name: string;
  value: string;
}

export function ClusterForm({ drivers, onSaved }: { drivers: string[]; onSaved: (cluster: Cluster) => void }) {
  const { api } = useSession();
  const client = useQueryClient();
  const [name, setName] = useState("");
  const [driver, setDriver] = useState(drivers[0] ?? "");
  const [endpoint, setEndpoint] = useState("");
  const [secrets, setSecrets] = useState<Secret[]>([{ name: "", value: "" }]);
  const [options, setOptions] = useState("{}");
  const [verify, setVerify] = useState(true);
  const [optionsError, setOptionsError] = useState("");
  const save = useMutation({
    mutationFn: (body: Schemas["ClusterCreate"]) => unwrap(api.POST("/api/v1/clusters", { body })),
    onSuccess: (cluster) => {
      void client.invalidateQueries({ queryKey: ["clusters"] });
      void client.invalidateQueries({ queryKey: ["setup"] });
      onSaved(cluster);
    },
  });
  const errors = fieldErrorsOf(save.error);
  const submit = (event: FormEvent) => {
    event.preventDefault();
    let parsed: Record<string, unknown>;
    try {
      parsed = JSON.parse(options || "{}") as Record<string, unknown>;
      if (typeof parsed !== "object" || Array.isArray(parsed) || parsed === null) throw new Error("not an object");
      setOptionsError("");
    } catch {
      setOptionsError("Options must be a JSON object, for example {\"clone_seconds\": 3}.");
      return;
    }
    const credentials = Object.fromEntries(
      secrets.filter((secret) => secret.name.trim()).map((secret) => [secret.name.trim(), secret.value]),
    );
    save.mutate({ name: name.trim(), driver, endpoint: endpoint.trim(), credentials, options: parsed, tls: { verify } });
  };
  const setSecret = (index: number, change: Partial<Secret>) =>
    setSecrets((current) => current.map((secret, at) => (at === index ? { ...secret, ...change } : secret)));
  return (
    <form onSubmit={submit} noValidate aria-label="Connect a cluster">
      <ProblemAlert error={save.error} />
      <div className="grid">
        <TextField label="Name" value={name} onChange={(e) => setName(e.target.value)} error={errors.name} required />
        <SelectField
          label="Driver"
          value={driver}
          onChange={(e) => setDriver(e.target.value)}
          error={errors.driver}
          hint="The hypervisor drivers installed on this instance."
        >
          {drivers.map((value) => (
            <option key={value} value={value}>
              {value}
            </option>
          ))}
        </SelectField>
      </div>
      <TextField
        label="Endpoint"
        value={endpoint}
        onChange={(e) => setEndpoint(e.target.value)}
        error={errors.endpoint}
        placeholder={driver === "simulator" ? "simulator://local" : "https://pve.example.org:8006"}
        hint="The cluster's API address, as the driver documents it."
      />
      <fieldset>
        <legend>Credentials (write-only: sealed at rest, never shown again)</legend>
        {secrets.map((secret, index) => (
          <div className="grid" key={index}>
            <TextField
              label={`Credential ${index + 1} name`}
              value={secret.name}
              onChange={(e) => setSecret(index, { name: e.target.value })}
              placeholder={driver === "proxmox" ? "token_id" : "token"}
            />
            <TextField
              label={`Credential ${index + 1} value`}
              type="password"
              autoComplete="new-password"
              value={secret.value}
              onChange={(e) => setSecret(index, { value: e.target.value })}
              error={errors[`credentials.${secret.name}`]}
            />
          </div>
        ))}
        <button type="button" className="secondary outline small" onClick={() => setSecrets((s) => [...s, { name: "", value: "" }])}>
          Add a credential
        </button>
        {errors.credentials ? <small className="field-error">{errors.credentials}</small> : null}
      </fieldset>
      <label>
        Options (JSON)
        <textarea
          value={options}
          onChange={(e) => setOptions(e.target.value)}
          rows={3}
          aria-invalid={optionsError || errors.options ? true : undefined}
        />
        {optionsError || errors.options ? <small className="field-error">{optionsError || errors.options}</small> : null}
      </label>
      <label>
        <input type="checkbox" role="switch" checked={verify} onChange={(e) => setVerify(e.target.checked)} /> Verify the
        cluster's TLS certificate
      </label>
      <button type="submit" aria-busy={save.isPending}>
        Connect
      </button>
    </form>
  );
}
