import { renderToStaticMarkup } from "react-dom/server";
import { describe, expect, it } from "vitest";
import { collect, DriverFields, initialValues, type Driver } from "./DriverFields";
import { field } from "./fieldFixture";

const proxmox: Driver = {
  name: "proxmox",
  title: "Proxmox VE",
  endpoint_help: "Any node of the cluster.",
  fields: [
    field("token_id", { label: "API token id", required: true, secret: true, placeholder: "deskpool@pve!deskpool" }),
    field("token_secret", { label: "API token secret", kind: "secret", required: true, secret: true }),
    field("request_timeout", { label: "Request timeout", kind: "number", default: 30, minimum: 0.001 }),
    field("verify_hosts", { label: "Verify hosts", kind: "boolean", default: true }),
    field("mode", { label: "Mode", kind: "choice", choices: ["fast", "safe"] }),
    field("nodes", { label: "Nodes", kind: "list", default: ["a", "b"] }),
    field("ports", { label: "Ports", kind: "json" }),
    field("retries", { label: "Retries", kind: "integer" }),
  ],
};

function render(values = initialValues(proxmox.fields), errors: Record<string, string> = {}, editing = false): string {
  return renderToStaticMarkup(
    <DriverFields driver={proxmox} values={values} onChange={() => undefined} errors={errors} editing={editing} />,
  );
}

describe("the driver's fields as a form", () => {
  it("renders each kind with its input, secrets as password inputs", () => {
    const html = render();
    expect(html).toContain("Credentials (write-only: sealed at rest, never shown again)");
    expect(html).toMatch(/<input[^>]*type="password"[^>]*autoComplete="new-password"/);
    expect(html).toMatch(/<input[^>]*type="text"[^>]*placeholder="deskpool@pve!deskpool"/);
    expect(html).toMatch(/<input[^>]*type="number"[^>]*step="any"[^>]*min="0.001"[^>]*value="30"/);
    expect(html).toMatch(/<input[^>]*type="checkbox"[^>]*checked=""/);
    expect(html).toContain('<option value="" selected="">(default)</option><option value="fast">fast</option>');
    expect(html).toMatch(/<textarea[^>]*>a\nb<\/textarea>/);
    expect(html).toContain("Proxmox VE options");
  });

  it("never shows a credential back, and says how to keep it when editing", () => {
    const html = render(initialValues(proxmox.fields, { token_secret: "hunter2", request_timeout: 5 }), {}, true);
    expect(html).not.toContain("hunter2");
    expect(html).toContain('placeholder="leave empty to keep"');
    expect(html).toContain("Leave empty to keep the stored credentials.");
    expect(html).toMatch(/value="5"/);
  });

  it("shows a 422's field errors next to their fields", () => {
    const html = render(undefined, {
      "credentials.token_secret": "API token secret is required.",
      "options.request_timeout": "Must be a number.",
    });
    expect(html).toMatch(/aria-invalid="true"[^>]*aria-describedby="[^"]*-error"/);
    expect(html).toContain('class="field-error">API token secret is required.</small>');
    expect(html).toContain('class="field-error">Must be a number.</small>');
  });
});

describe("what the inputs send", () => {
  it("sends typed credentials and only options that differ from their defaults", () => {
    const values = {
      ...initialValues(proxmox.fields),
      token_id: " deskpool@pve!deskpool ",
      token_secret: " s3cret ",
      request_timeout: "12.5",
      nodes: "a\nb",
      mode: "safe",
      ports: '{"rdp": 3390}',
      retries: "3",
    };
    expect(collect(proxmox.fields, values)).toEqual({
      credentials: { token_id: " deskpool@pve!deskpool ", token_secret: " s3cret " },
      options: { request_timeout: 12.5, mode: "safe", ports: { rdp: 3390 }, retries: 3 },
      errors: {},
    });
  });

  it("keeps the stored credentials when editing and none is typed", () => {
    const values = { ...initialValues(proxmox.fields), verify_hosts: false };
    const collected = collect(proxmox.fields, values, true);
    expect(collected.credentials).toBeUndefined();
    expect(collected.options).toEqual({ verify_hosts: false });
    expect(collect(proxmox.fields, values, false).credentials).toEqual({});
  });

  it("names the inputs it cannot read, keyed like the API's errors", () => {
    const values = { ...initialValues(proxmox.fields), retries: "2.5", ports: "{", request_timeout: "soon" };
    expect(collect(proxmox.fields, values).errors).toEqual({
      "options.retries": "Must be an integer.",
      "options.ports": "Must be JSON.",
      "options.request_timeout": "Must be a number.",
    });
  });
});

describe("secret options", () => {
  const simulator: Driver = {
    name: "simulator",
    title: "Simulator",
    endpoint_help: "",
    fields: [
      field("required_token", { label: "Required token", kind: "secret", sealed: true }),
      field("desktop", { label: "Desktop", kind: "json", sealed_keys: ["password"] }),
    ],
  };

  it("are password inputs that say how to keep the stored value, and name write-only keys", () => {
    const html = renderToStaticMarkup(
      <DriverFields
        driver={simulator}
        values={initialValues(simulator.fields, { desktop: { host: "h" } })}
        onChange={() => undefined}
        errors={{}}
        editing
      />,
    );
    expect(html).toMatch(/<input[^>]*type="password"[^>]*placeholder="leave empty to keep"/);
    expect(html).toContain("Write-only: leave empty to keep the stored value.");
    expect(html).toContain("Write-only keys (never shown back): password.");
  });

  it("are sent among the options when typed, and left out when not", () => {
    const typed = collect(simulator.fields, { required_token: "t0k3n", desktop: "" }, true);
    expect(typed.options).toEqual({ required_token: "t0k3n" });
    expect(collect(simulator.fields, { required_token: "", desktop: "" }, true).options).toEqual({});
  });
});
