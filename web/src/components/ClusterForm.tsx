/**
 * Connect a cluster, or change one: an installed driver, its endpoint, TLS settings, and the
 * credentials (write-only) and options the driver declares (`GET /api/v1/drivers`).
 */
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useState, type FormEvent } from "react";
import { useUnsavedDraft } from "./Unsaved";
import { unwrap, type Schemas } from "../api/client";
import { useSession } from "../session";
import { collect, DriverFields, initialValues, type Driver, type FieldValues } from "./DriverFields";
import { SelectField, TextAreaField, TextField } from "./Field";
import { fieldErrorsOf, ProblemAlert } from "./Problem";

type Cluster = Schemas["Cluster"];

/** The installed drivers and their fields (for callers with `clusters:manage`). */
export function useDrivers() {
  const { api } = useSession();
  return useQuery({
    queryKey: ["drivers"],
    staleTime: 5 * 60_000,
    queryFn: () => unwrap(api.GET("/api/v1/drivers", { params: { query: { limit: 500 } } })),
  });
}

export function ClusterForm({ cluster, onSaved }: { cluster?: Cluster; onSaved: (cluster: Cluster) => void }) {
  const drivers = useDrivers();
  if (drivers.error) return <ProblemAlert error={drivers.error} />;
  if (!drivers.data) return <p aria-busy="true">Listing the installed drivers…</p>;
  if (!drivers.data.items.length) {
    return <p>No hypervisor driver is installed on this instance: install a driver's package and restart deskpool.</p>;
  }
  return <ClusterFormFor drivers={drivers.data.items} cluster={cluster} onSaved={onSaved} />;
}

function ClusterFormFor({
  drivers,
  cluster,
  onSaved,
}: {
  drivers: Driver[];
  cluster?: Cluster;
  onSaved: (cluster: Cluster) => void;
}) {
  const { api } = useSession();
  const client = useQueryClient();
  const editing = Boolean(cluster);
  const [name, setName] = useState(cluster?.name ?? "");
  const [driverName, setDriverName] = useState(cluster?.driver ?? drivers[0]?.name ?? "");
  const [endpoint, setEndpoint] = useState(cluster?.endpoint ?? "");
  const [verify, setVerify] = useState(cluster?.tls.verify ?? true);
  const [fingerprint, setFingerprint] = useState(cluster?.tls.fingerprint ?? "");
  const [caCertificate, setCaCertificate] = useState(cluster?.tls.ca_certificate ?? "");
  const driver = drivers.find((item) => item.name === driverName);
  const [values, setValues] = useState<FieldValues>(() =>
    initialValues(driver?.fields ?? [], cluster?.options as Record<string, unknown> | undefined),
  );
  const [localErrors, setLocalErrors] = useState<Record<string, string>>({});
  const save = useMutation({
    mutationFn: (body: Schemas["ClusterCreate"]): Promise<Cluster> => {
      if (!cluster) return unwrap(api.POST("/api/v1/clusters", { body }));
      const { driver: _driver, ...change } = body;
      void _driver;
      return unwrap(
        api.PATCH("/api/v1/clusters/{cluster_id}", { params: { path: { cluster_id: cluster.id } }, body: change }),
      );
    },
    onSuccess: (saved) => {
      void client.invalidateQueries({ queryKey: ["clusters"] });
      void client.invalidateQueries({ queryKey: ["setup"] });
      onSaved(saved);
    },
  });
  useUnsavedDraft({ name, driverName, endpoint, verify, fingerprint, caCertificate, values }, save.isSuccess);
  const errors = { ...fieldErrorsOf(save.error), ...localErrors };
  const chooseDriver = (next: string) => {
    setDriverName(next);
    setValues(initialValues(drivers.find((item) => item.name === next)?.fields ?? []));
    setLocalErrors({});
  };
  const submit = (event: FormEvent) => {
    event.preventDefault();
    // A driver that is not installed declares nothing: its options and credentials stay.
    const collected = driver ? collect(driver.fields, values, editing) : { options: undefined, errors: {} };
    setLocalErrors(collected.errors);
    if (Object.keys(collected.errors).length) return;
    const body: Schemas["ClusterCreate"] = {
      name: name.trim(),
      driver: driverName,
      endpoint: endpoint.trim(),
      tls: { verify, fingerprint: fingerprint.trim() || null, ca_certificate: caCertificate.trim() || null },
    };
    if (collected.options) body.options = collected.options;
    if ("credentials" in collected && collected.credentials) body.credentials = collected.credentials;
    save.mutate(body);
  };
  return (
    <form onSubmit={submit} noValidate aria-label={editing ? `Change the cluster ${cluster?.name}` : "Connect a cluster"}>
      <ProblemAlert error={save.error} />
      <div className="grid">
        <TextField label="Name" value={name} onChange={(e) => setName(e.target.value)} error={errors.name} required />
        <SelectField
          label="Driver"
          value={driverName}
          onChange={(e) => chooseDriver(e.target.value)}
          error={errors.driver}
          disabled={editing}
          hint={editing ? "A cluster keeps its driver." : "The hypervisor drivers installed on this instance."}
        >
          {driver ? null : <option value={driverName}>{driverName} (not installed)</option>}
          {drivers.map((item) => (
            <option key={item.name} value={item.name}>
              {item.title}
            </option>
          ))}
        </SelectField>
      </div>
      <TextField
        label="Endpoint"
        value={endpoint}
        onChange={(e) => setEndpoint(e.target.value)}
        error={errors.endpoint}
        required
        hint={driver?.endpoint_help || "The cluster's API address."}
      />
      {!driver ? (
        <p className="error-text">
          The driver {driverName} is not installed here: its options and credentials cannot change until it is.
        </p>
      ) : null}
      {driver ? (
        <DriverFields
          driver={driver}
          values={values}
          onChange={(field, value) => setValues((current) => ({ ...current, [field]: value }))}
          errors={errors}
          editing={editing}
        />
      ) : null}
      <fieldset>
        <legend>TLS</legend>
        <label>
          <input type="checkbox" role="switch" checked={verify} onChange={(e) => setVerify(e.target.checked)} /> Verify the
          cluster's TLS certificate
        </label>
        {errors["tls.verify"] ? <small className="field-error">{errors["tls.verify"]}</small> : null}
        <TextField
          label="Certificate fingerprint (SHA-256)"
          value={fingerprint}
          onChange={(e) => setFingerprint(e.target.value)}
          error={errors["tls.fingerprint"]}
          placeholder="AB:CD:…"
          hint="Pins a self-signed certificate: only the pin is checked, not the chain. Empty for none."
        />
        <TextAreaField
          label="CA certificate (PEM)"
          value={caCertificate}
          onChange={(e) => setCaCertificate(e.target.value)}
          error={errors["tls.ca_certificate"]}
          hint="Trusted instead of the system's CAs. Empty for none."
        />
      </fieldset>
      <button type="submit" aria-busy={save.isPending}>
        {editing ? "Save" : "Connect"}
      </button>
    </form>
  );
}
