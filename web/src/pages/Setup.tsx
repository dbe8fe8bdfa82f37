/** First login: connect a cluster, check it, pick a template and create the first pool. */
import { useMutation, useQuery } from "@tanstack/react-query";
import { useState } from "react";
import { useNavigate } from "react-router";
import { unwrap, type Schemas } from "../api/client";
import { CheckResultView } from "../components/CheckResult";
import { ClusterForm } from "../components/ClusterForm";
import { ProblemAlert } from "../components/Problem";
import { useSession } from "../session";
import { PoolForm } from "./PoolForm";

type Cluster = Schemas["Cluster"];
const STEPS = ["Connect a cluster", "Check the connection", "Choose a template", "Create the first pool"];

export function SetupPage() {
  const { api } = useSession();
  const navigate = useNavigate();
  const [step, setStep] = useState(0);
  const [cluster, setCluster] = useState<Cluster | null>(null);
  const [template, setTemplate] = useState("");
  const [editing, setEditing] = useState(false);
  const setup = useQuery({ queryKey: ["setup"], queryFn: () => unwrap(api.GET("/api/v1/setup")) });
  const check = useMutation({
    mutationFn: (id: string) =>
      unwrap(api.POST("/api/v1/clusters/{cluster_id}/check", { params: { path: { cluster_id: id } } })),
  });
  const templates = useQuery({
    queryKey: ["clusters", cluster?.id, "templates"],
    enabled: step >= 2 && Boolean(cluster),
    queryFn: () =>
      unwrap(
        api.GET("/api/v1/clusters/{cluster_id}/templates", {
          params: { path: { cluster_id: cluster!.id }, query: { limit: 500 } },
        }),
      ),
  });
  return (
    <section className="narrow">
      <h1>Set up deskpool</h1>
      <ol className="steps" aria-label="Setup steps">
        {STEPS.map((label, index) => (
          <li key={label} aria-current={index === step ? "step" : undefined} className={index < step ? "done" : ""}>
            {label}
          </li>
        ))}
      </ol>
      <ProblemAlert error={setup.error} />
      {step === 0 && setup.data ? (
        setup.data.can_connect_cluster ? (
          <>
            <h2>{STEPS[0]}</h2>
            <p>
              deskpool runs desktops on a virtualization cluster. Choose an installed driver and fill in what it asks
              for; credentials are sealed and never shown again.
            </p>
            <ClusterForm
              onSaved={(saved) => {
                setCluster(saved);
                setStep(1);
                check.mutate(saved.id);
              }}
            />
          </>
        ) : (
          <p>No cluster is connected yet. Ask an administrator to connect one.</p>
        )
      ) : null}
      {step === 1 && cluster ? (
        <>
          <h2>{STEPS[1]}</h2>
          <ProblemAlert error={check.error} />
          {check.isPending ? <p aria-busy="true">Checking {cluster.name}…</p> : null}
          {check.data ? <CheckResultView result={check.data} /> : null}
          {editing ? (
            <ClusterForm
              cluster={cluster}
              onSaved={(saved) => {
                setCluster(saved);
                setEditing(false);
                check.mutate(saved.id);
              }}
            />
          ) : null}
          <div className="toolbar">
            <button type="button" className="secondary" onClick={() => check.mutate(cluster.id)}>
              Check again
            </button>
            <button type="button" className="secondary outline" onClick={() => setEditing((value) => !value)}>
              {editing ? "Close" : "Change the connection"}
            </button>
            <button type="button" disabled={!check.data?.ok} onClick={() => setStep(2)}>
              Next
            </button>
          </div>
        </>
      ) : null}
      {step === 2 && cluster ? (
        <>
          <h2>{STEPS[2]}</h2>
          <ProblemAlert error={templates.error} />
          {templates.isLoading ? <p aria-busy="true">Listing templates…</p> : null}
          <fieldset>
            <legend>Templates of {cluster.name}</legend>
            {templates.data?.items.map((item) => (
              <label key={`${item.node}/${item.id}`}>
                <input
                  type="radio"
                  name="template"
                  value={item.id}
                  checked={template === item.id}
                  onChange={() => setTemplate(item.id)}
                />{" "}
                {item.name} <small>({item.os_type}, on {item.node})</small>
              </label>
            ))}
          </fieldset>
          <button type="button" disabled={!template} onClick={() => setStep(3)}>
            Next
          </button>
        </>
      ) : null}
      {step === 3 && cluster ? (
        <>
          <h2>{STEPS[3]}</h2>
          <PoolForm
            clusterId={cluster.id}
            template={template}
            submitLabel="Create the pool"
            onSaved={(pool) => navigate(`/pools/${pool.id}`)}
          />
        </>
      ) : null}
    </section>
  );
}
