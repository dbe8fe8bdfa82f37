import { describe, expect, it } from "vitest";
import type { Schemas } from "../api/client";
import { jobResource } from "./Jobs";

const ID = "25a3738c-1111-2222-3333-444455556666";
const job = (over: Partial<Schemas["Job"]>): Schemas["Job"] =>
  ({ id: 1, kind: "desktop.provision", resource_type: "desktops", resource_id: ID, resource_name: "np-01", ...over }) as Schemas["Job"];

describe("a job's resource", () => {
  it("reads as its name, the id on hover, never the id instead", () => {
    expect(jobResource(job({}))).toEqual({ text: "desktop np-01", title: `Desktop id ${ID}` });
    expect(jobResource(job({ resource_type: "pools", resource_name: "lab" }))).toEqual({ text: "pool lab", title: `Pool id ${ID}` });
  });

  it("says a named resource that is gone is deleted, and names the kind of one without a name", () => {
    expect(jobResource(job({ resource_type: "clusters", resource_name: null }))).toEqual({
      text: "deleted cluster",
      title: `Cluster id ${ID}`,
    });
    expect(jobResource(job({ resource_type: "sessions", resource_name: null }))).toEqual({ text: "session", title: `Session id ${ID}` });
    expect(jobResource(job({ resource_type: null, resource_id: null, resource_name: null }))).toEqual({ text: "—" });
  });
});
