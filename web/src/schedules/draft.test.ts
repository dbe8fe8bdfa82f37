import { describe, expect, it } from "vitest";
import type { Schemas } from "../api/client";
import { bodyOf, draftOf, exceptionDraftOf, isTimeZone, itemErrors, nestedErrors, previewBodyOf, renamePhase, timeZones } from "./draft";

const schedule: Schemas["Schedule"] = {
  id: "s1",
  name: "Berlin office",
  time_zone: "Europe/Berlin",
  phases: [
    {
      name: "peak",
      days: ["mon", "tue", "wed", "thu", "fri"],
      start: "07:00",
      min_ready: 50,
      min_ready_unit: "percent",
      spare: 2,
      idle: "keep",
      logoff: null,
    },
    {
      name: "off-peak",
      days: ["mon", "tue", "wed", "thu", "fri"],
      start: "19:00",
      min_ready: 0,
      min_ready_unit: "count",
      spare: 1,
      idle: "power_off",
      logoff: { scope: "idle", wait_seconds: 600, message: "Save your work" },
    },
  ],
  exceptions: [
    { name: "christmas", first: "2026-12-24", last: "2026-12-26", phase: "off-peak", settings: null },
    {
      name: "exam day",
      first: "2026-06-01",
      last: "2026-06-01",
      phase: null,
      settings: { min_ready: 30, min_ready_unit: "count", spare: 5, idle: "keep", logoff: null },
    },
  ],
  generation: 3,
  in_force: null,
  created_at: "2026-01-01T00:00:00Z",
  updated_at: "2026-01-01T00:00:00Z",
};

describe("the schedule form", () => {
  it("gives back the schedule it was filled with", () => {
    const { id, generation, in_force, created_at, updated_at, ...input } = schedule;
    void [id, generation, in_force, created_at, updated_at];
    const body = bodyOf(draftOf(schedule));
    expect(body).toEqual({
      ...input,
      // A one-day exception is sent without its last day (the API's default: the first).
      exceptions: [input.exceptions[0], { ...input.exceptions[1], last: null }],
    });
  });

  it("starts a new schedule with a peak and an off-peak phase in the browser's zone", () => {
    const draft = draftOf(undefined, "Europe/Paris");
    expect(draft.time_zone).toBe("Europe/Paris");
    expect(bodyOf(draft).phases.map((phase) => [phase.name, phase.start, phase.idle])).toEqual([
      ["peak", "07:00", "keep"],
      ["off-peak", "19:00", "power_off"],
    ]);
  });

  it("sends days in the week's order and trims names", () => {
    const draft = draftOf(schedule);
    draft.name = "  Berlin  ";
    draft.phases[0] = { ...draft.phases[0]!, name: " peak ", days: ["fri", "mon", "wed"] };
    const body = bodyOf(draft);
    expect(body.name).toBe("Berlin");
    expect(body.phases[0]).toMatchObject({ name: "peak", days: ["mon", "wed", "fri"] });
  });

  it("sends a number that is not whole as typed, for the API to name the field", () => {
    const draft = draftOf(schedule);
    draft.phases[0] = { ...draft.phases[0]!, min_ready: "ten", spare: " 3 " };
    const phase = bodyOf(draft).phases[0]!;
    expect(phase.min_ready).toBe("ten");
    expect(phase.spare).toBe(3);
  });

  it("sends a log-off only when the phase has one", () => {
    const draft = draftOf(schedule);
    expect(bodyOf(draft).phases[0]!.logoff).toBeNull();
    draft.phases[1] = { ...draft.phases[1]!, logoff: false };
    expect(bodyOf(draft).phases[1]!.logoff).toBeNull();
  });

  it("sends an exception's phase or its own settings, never both", () => {
    const draft = draftOf(schedule);
    draft.exceptions[0] = { ...draft.exceptions[0]!, mode: "own" };
    draft.exceptions[1] = { ...draft.exceptions[1]!, mode: "phase", phase: "peak" };
    const [first, second] = bodyOf(draft).exceptions!;
    expect(first).toMatchObject({ phase: null, settings: { min_ready: 0, spare: 0, idle: "keep", logoff: null } });
    expect(second).toMatchObject({ phase: "peak", settings: null });
  });

  it("a new exception runs the first phase", () => {
    const draft = draftOf(schedule);
    expect(exceptionDraftOf(undefined, draft.phases)).toMatchObject({ mode: "phase", phase: "peak", first: "", last: "" });
  });

  it("previews a schedule without a name yet, and leaves out exceptions without a date", () => {
    const draft = draftOf(schedule);
    draft.name = " ";
    draft.exceptions.push(exceptionDraftOf(undefined, draft.phases));
    const body = previewBodyOf(draft);
    expect(body.name).toBe("preview");
    expect(body.exceptions!.map((exception) => exception.name)).toEqual(["christmas", "exam day"]);
    expect(previewBodyOf(draftOf(schedule)).name).toBe("Berlin office");
  });

  it("renames the exceptions' phase with the phase", () => {
    const renamed = renamePhase(draftOf(schedule), 1, "night");
    expect(renamed.phases[1]!.name).toBe("night");
    expect(renamed.exceptions[0]!.phase).toBe("night");
    expect(renamed.exceptions[1]!.mode).toBe("own");
  });
});

describe("field errors of list items", () => {
  it("are given to the item they concern", () => {
    const errors = {
      name: "taken",
      "phases.1.min_ready": "must be between 0 and 100",
      "phases.1.logoff.wait_seconds": "too long",
      "phases.1.days.2": "Must be one of: mon.",
      "phases.10.name": "not this one",
      "exceptions.0": "must name a phase of the schedule or give settings of its own",
    };
    expect(itemErrors(errors, "phases", 1)).toEqual({
      min_ready: "must be between 0 and 100",
      "logoff.wait_seconds": "too long",
      days: "Must be one of: mon.",
    });
    expect(itemErrors(errors, "exceptions", 0)).toEqual({
      "": "must name a phase of the schedule or give settings of its own",
    });
    expect(nestedErrors({ "settings.spare": "too many", settings: "bad", setting: "other" }, "settings")).toEqual({
      spare: "too many",
      "": "bad",
    });
  });
});

describe("time zones", () => {
  it("suggests the IANA zones, UTC among them", () => {
    const zones = timeZones();
    expect(zones).toContain("Europe/Berlin");
    expect(zones).toContain("UTC");
  });

  it("accepts zone names and refuses the rest", () => {
    expect(isTimeZone("Europe/Berlin")).toBe(true);
    expect(isTimeZone("America/Argentina/Buenos_Aires")).toBe(true);
    expect(isTimeZone("Europe/Atlantis")).toBe(false);
    expect(isTimeZone(" Europe/Berlin")).toBe(false);
    expect(isTimeZone("+01:00")).toBe(false);
    expect(isTimeZone("")).toBe(false);
  });
});
