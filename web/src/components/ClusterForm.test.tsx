import { QueryClient, QueryClientProvider } from "@tanstack/react-query";
import { renderToStaticMarkup } from "react-dom/server";
import { describe, expect, it } from "vitest";
import type { Schemas } from "../api/client";
import { SessionContext, type Session } from "../session";
import { ClusterForm } from "./ClusterForm";
import type { Driver } from "./DriverFields";
import { field } from "./fieldFixture";

const DRIVERS: Driver[] = [
  {
    name: "proxmox",
    title: "Proxmox VE",
    endpoint_help: "Any node of the cluster.",
    fields: [
      field("token_id", { label: "API token id", required: true, secret: true }),
      field("token_secret", { label: "API token secret", kind: "secret", required: true, secret: true }),
      field("request_timeout", { label: "Request timeout", kind: "number", default: 30 }),
    ],
  },
  {
    name: "simulator",
    title: "Simulator",
    endpoint_help: "Informational only.",
    fields: [field("clone_seconds", { label: "Clone time", kind: "number", default: 0.01 })],
  },
];

const CLUSTER: Schemas["Cluster"] = {
  id: "c1",
  name: "pve-lab",
  driver: "proxmox",
  driver_status: "installed",
  endpoint: "pve1.example.com",
  tls: { verify: true, ca_certificate: null, fingerprint: "AB:CD" },
  options: { request_timeout: 12 },
  credentials: { set: true, changed_at: "2026-11-23T00:00:00Z" },
  secret_options: { set: false, changed_at: null },
  created_at: "2026-11-23T00:00:00Z",
  updated_at: "2026-11-23T00:00:00Z",
  last_check_at: null,
  last_check_ok: null,
  last_check_error: null,
};

function render(cluster?: Schemas["Cluster"]): string {
  const client = new QueryClient();
  client.setQueryData(["drivers"], { items: DRIVERS, next: null });
  const session = { api: {} } as unknown as Session;
  return renderToStaticMarkup(
    <QueryClientProvider client={client}>
      <SessionContext.Provider value={session}>
        <ClusterForm cluster={cluster} onSaved={() => undefined} />
      </SessionContext.Provider>
    </QueryClientProvider>,
  );
}

describe("the cluster form", () => {
  it("offers the installed drivers and renders the first one's declared fields", () => {
    const html = render();
    expect(html).toContain('aria-label="Connect a cluster"');
    expect(html).toContain('<option value="proxmox" selected="">Proxmox VE</option><option value="simulator">Simulator</option>');
    expect(html).toContain("Any node of the cluster.");
    expect(html).toContain("API token id");
    expect(html).toMatch(/<input[^>]*type="password"[^>]*required=""/);
    expect(html).not.toContain("Clone time");
    expect(html).toContain(">Connect</button>");
  });

  it("changes a cluster without showing its credentials back", () => {
    const html = render(CLUSTER);
    expect(html).toContain('aria-label="Change the cluster pve-lab"');
    expect(html).toMatch(/<select[^>]*disabled=""/);
    expect(html).toMatch(/value="pve-lab"/);
    expect(html).toMatch(/value="pve1.example.com"/);
    expect(html).toMatch(/type="number"[^>]*value="12"/);
    expect(html).toMatch(/value="AB:CD"/);
    expect(html.match(/placeholder="leave empty to keep"/g)).toHaveLength(2);
    expect(html).not.toMatch(/<input[^>]*type="password"[^>]*required=""/);
    expect(html).toContain(">Save</button>");
  });

  it("keeps what a driver that is not installed declares", () => {
    const html = render({ ...CLUSTER, driver: "gone", driver_status: "not_installed" });
    expect(html).toContain("The driver gone is not installed here");
    expect(html).toContain('<option value="gone" selected="">gone (not installed)</option>');
    expect(html).not.toContain("API token id");
  });

  it("says when no driver is installed", () => {
    const client = new QueryClient();
    client.setQueryData(["drivers"], { items: [], next: null });
    const html = renderToStaticMarkup(
      <QueryClientProvider client={client}>
        <SessionContext.Provider value={{ api: {} } as unknown as Session}>
          <ClusterForm onSaved={() => undefined} />
        </SessionContext.Provider>
      </QueryClientProvider>,
    );
    expect(html).toContain("No hypervisor driver is installed");
  });
});
