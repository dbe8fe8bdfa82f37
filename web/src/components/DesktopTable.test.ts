import { describe, expect, it } from "vitest";
import type { Schemas } from "../api/client";
import { fitsPool } from "../pages/Rollouts";
import { bulkLabel, questionFor } from "./DesktopTable";
import { actorWords } from "./Names";

const desktop = (over: Partial<Schemas["Desktop"]>): Schemas["Desktop"] =>
  ({
    id: "d1",
    name: "np-01",
    pool_id: "p",
    pool_name: "names-pool",
    assigned_user: null,
    assigned_user_name: null,
    assigned_user_email: null,
    in_session: false,
    allowed_actions: ["power_off", "restart", "delete"],
    ...over,
  }) as Schemas["Desktop"];

describe("guard-rails", () => {
  it("asks before disrupting someone's desktop, naming the action and the desktop", () => {
    const used = desktop({ assigned_user: "u", assigned_user_name: "Desk User", in_session: true });
    const question = questionFor("power_off", [used]);
    expect(question?.title).toBe("power off np-01?");
    expect(question?.confirm).toBe("power off np-01");
  });

  it("does not ask to power off a desktop nobody uses, but always before deleting", () => {
    expect(questionFor("power_off", [desktop({})])).toBeNull();
    expect(questionFor("delete", [desktop({})])?.title).toBe("delete np-01?");
    expect(questionFor("restart", [desktop({}), desktop({ id: "d2", in_session: true })])?.title).toBe(
      "restart 2 desktops?",
    );
  });
});

describe("bulk actions", () => {
  it("label their buttons in sentence case with the count", () => {
    expect(bulkLabel("power_off", 4)).toBe("Power off 4 selected");
    expect(bulkLabel("delete", 1)).toBe("Delete 1 selected");
  });
});

describe("names", () => {
  it("offers only templates of the pool's OS (or of an unknown one)", () => {
    expect(fitsPool({ os_type: "linux" }, "linux")).toBe(true);
    expect(fitsPool({ os_type: "windows" }, "linux")).toBe(false);
    expect(fitsPool({ os_type: "unknown" }, "linux")).toBe(true);
  });

  it("names an actor in words, never by a bare id", () => {
    expect(actorWords("3f2b8c1e-1111-2222-3333-444455556666", "Desk User")).toBe("Desk User");
    expect(actorWords("3f2b8c1e-1111-2222-3333-444455556666", null)).toBe("deleted user");
    expect(actorWords("system:reconciler", null)).toBe("deskpool (reconciler)");
  });
});
