import { describe, expect, it } from "vitest";
import type { Me } from "../auth/permissions";
import { groupedItems, visibleItems } from "./Layout";

const user: Me = {
  id: "u",
  issuer: "i",
  subject: "s",
  email: null,
  display_name: null,
  kind: "human",
  groups: [],
  roles: [],
  permissions: [],
  is_platform_admin: false,
};

describe("navigation", () => {
  it("shows a desktop user only My desktops", () => {
    expect(visibleItems(user).map((item) => item.label)).toEqual(["My desktops"]);
  });

  it("shows what the permissions allow", () => {
    const labels = visibleItems({ ...user, permissions: ["pools:read", "audit:read", "reports:read"] }).map(
      (item) => item.label,
    );
    expect(labels).toEqual(["Dashboard", "My desktops", "Pools", "Reports", "Audit"]);
  });

  it("shows schedules to those who may read them", () => {
    const labels = visibleItems({ ...user, permissions: ["schedules:read"] }).map((item) => item.label);
    expect(labels).toEqual(["My desktops", "Schedules"]);
  });

  it("shows an administrator everything", () => {
    expect(visibleItems({ ...user, is_platform_admin: true }).length).toBe(15);
  });

  it("shows Recordings to holders of recordings:read only", () => {
    expect(visibleItems({ ...user, permissions: ["recordings:read"] }).map((item) => item.label)).toEqual([
      "My desktops",
      "Recordings",
    ]);
    expect(visibleItems({ ...user, permissions: ["sessions:read"] }).map((item) => item.label)).not.toContain(
      "Recordings",
    );
  });

  it("groups an administrator's pages into desktops, people, monitoring and settings", () => {
    const groups = groupedItems({ ...user, is_platform_admin: true }).map(([group, items]) => [
      group,
      items.map((item) => item.label),
    ]);
    expect(groups).toEqual([
      ["Desktops", ["Dashboard", "My desktops", "Pools", "Desktops", "Sessions", "Schedules"]],
      ["People", ["People", "Help desk"]],
      ["Monitoring", ["Reports", "Recordings", "Audit", "Jobs"]],
      ["Settings", ["Clusters", "Webhooks", "License"]],
    ]);
    expect(groupedItems(user).map(([group]) => group)).toEqual(["Desktops"]);
  });
});
