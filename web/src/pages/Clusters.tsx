/** Clusters: connections with their check, nodes, templates and orphans. */
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useState } from "react";
import { Link, useParams } from "react-router";
import { unwrap, type Schemas } from "../api/client";
import { can } from "../auth/permissions";
import { Badge } from "../components/Badge";
import { CheckResultView } from "../components/CheckResult";
import { ClusterForm } from "../components/ClusterForm";
import { DataTable, type Column } from "../components/DataTable";
import { ProblemAlert } from "../components/Problem";
import { bytes, when } from "../format";
import { useSession } from "../session";

type Cluster = Schemas["Cluster"];

export function ClustersPage() {
  const { api, me } = useSession();
  const [adding, setAdding] = useState(false);
  const clusters = useQuery({
    queryKey: ["clusters", "list"],
    queryFn: () => unwrap(api.GET("/api/v1/clusters", { params: { query: { limit: 500 } } })),
  });
  const columns: Column<Cluster>[] = [
    { header: "Name", cell: (c) => <Link to={`/clusters/${c.id}`}>{c.name}</Link> },
    { header: "Driver", cell: (c) => `${c.driver}${c.driver_status === "installed" ? "" : " (not installed)"}` },
    { header: "Endpoint", cell: (c) => <code>{c.endpoint}</code> },
    {
      header: "Last check",
      cell: (c) =>
        c.last_check_at ? (
          <>
            <Badge value={c.last_check_ok ? "success" : "failure"} /> {when(c.last_check_at)}
          </>
        ) : (
          "never"
        ),
    },
  ];
  return (
    <section>
      <div className="page-head">
        <h1>Clusters</h1>
        {can(me, "clusters:manage") ? (
          <button type="button" onClick={() => setAdding((value) => !value)}>
            {adding ? "Close" : "Connect a cluster"}
          </button>
        ) : null}
      </div>
      {adding ? <ClusterForm onSaved={() => setAdding(false)} /> : null}
      <ProblemAlert error={clusters.error} />
      <DataTable caption="Clusters" columns={columns} rows={clusters.data?.items ?? []} rowKey={(c) => c.id} loading={clusters.isLoading} />
    </section>
  );
}

export function ClusterDetailPage() {
  const { clusterId = "" } = useParams();
  const { api, me } = useSession();
  const client = useQueryClient();
  const path = { cluster_id: clusterId };
  const cluster = useQuery({
    queryKey: ["clusters", clusterId],
    queryFn: () => unwrap(api.GET("/api/v1/clusters/{cluster_id}", { params: { path } })),
  });
  const nodes = useQuery({
    queryKey: ["clusters", clusterId, "nodes"],
    queryFn: () => unwrap(api.GET("/api/v1/clusters/{cluster_id}/nodes", { params: { path, query: { limit: 500 } } })),
  });
  const templates = useQuery({
    queryKey: ["clusters", clusterId, "templates"],
    queryFn: () => unwrap(api.GET("/api/v1/clusters/{cluster_id}/templates", { params: { path, query: { limit: 500 } } })),
  });
  const orphans = useQuery({
    queryKey: ["clusters", clusterId, "orphans"],
    queryFn: () => unwrap(api.GET("/api/v1/clusters/{cluster_id}/orphans", { params: { path, query: { limit: 500 } } })),
  });
  const check = useMutation({
    mutationFn: () => unwrap(api.POST("/api/v1/clusters/{cluster_id}/check", { params: { path } })),
    onSettled: () => void client.invalidateQueries({ queryKey: ["clusters", clusterId] }),
  });
  const removeOrphan = useMutation({
    mutationFn: (vmId: string) =>
      unwrap(api.DELETE("/api/v1/clusters/{cluster_id}/orphans/{vm_id}", { params: { path: { ...path, vm_id: vmId } } })),
    onSettled: () => void client.invalidateQueries({ queryKey: ["clusters", clusterId, "orphans"] }),
  });
  const manage = can(me, "clusters:manage");
  const [editing, setEditing] = useState(false);
  if (cluster.error) return <ProblemAlert error={cluster.error} />;
  if (!cluster.data) return <p aria-busy="true">Loading…</p>;
  const c = cluster.data;
  return (
    <section>
      <div className="page-head">
        <h1>Cluster {c.name}</h1>
        {manage ? (
          <div className="toolbar">
            <button type="button" className="secondary" onClick={() => setEditing((value) => !value)}>
              {editing ? "Close" : "Change the connection"}
            </button>
            <button type="button" onClick={() => check.mutate()} aria-busy={check.isPending}>
              Check connection
            </button>
          </div>
        ) : null}
      </div>
      <p className="meta">
        {c.driver} · <code>{c.endpoint}</code> · credentials {c.credentials.set ? "stored" : "none"} · TLS{" "}
        {c.tls.verify ? "verified" : "not verified"}
      </p>
      {editing ? (
        <ClusterForm
          cluster={c}
          onSaved={() => {
            setEditing(false);
            check.reset();
          }}
        />
      ) : null}
      <ProblemAlert error={check.error ?? removeOrphan.error} />
      {check.data ? <CheckResultView result={check.data} /> : c.last_check_error ? <p className="error-text">{c.last_check_error}</p> : null}
      <h2>Nodes</h2>
      <ProblemAlert error={nodes.error} />
      <DataTable
        caption="Nodes"
        rows={nodes.data?.items ?? []}
        rowKey={(n) => n.name}
        loading={nodes.isLoading}
        columns={[
          { header: "Name", cell: (n) => n.name },
          { header: "Online", cell: (n) => (n.online ? "yes" : "no") },
          { header: "CPUs", className: "num", cell: (n) => n.cpu_count ?? "—" },
          { header: "Memory", className: "num", cell: (n) => bytes(n.memory_bytes) },
        ]}
      />
      <h2>Templates</h2>
      <ProblemAlert error={templates.error} />
      <DataTable
        caption="Templates"
        rows={templates.data?.items ?? []}
        rowKey={(t) => `${t.node}/${t.id}`}
        loading={templates.isLoading}
        columns={[
          { header: "Name", cell: (t) => t.name },
          { header: "Id", cell: (t) => <code>{t.id}</code> },
          { header: "OS", cell: (t) => t.os_type },
          { header: "Node", cell: (t) => t.node },
        ]}
      />
      <h2>Orphans</h2>
      <p>VMs on this cluster that no pool or desktop owns. They are never deleted unless you ask.</p>
      <ProblemAlert error={orphans.error} />
      <DataTable
        caption="Orphans"
        rows={orphans.data?.items ?? []}
        rowKey={(o) => o.vm_id}
        loading={orphans.isLoading}
        empty="No orphan VM."
        columns={[
          { header: "VM", cell: (o) => `${o.name} (${o.vm_id})` },
          { header: "Reported", cell: (o) => when(o.reported_at) },
          {
            header: "Actions",
            cell: (o) =>
              manage ? (
                <button
                  type="button"
                  className="contrast outline small"
                  onClick={() => window.confirm(`Delete the VM ${o.name}?`) && removeOrphan.mutate(o.vm_id)}
                >
                  Delete VM
                </button>
              ) : null,
          },
        ]}
      />
    </section>
  );
}
