import { describe, expect, it } from "vitest";
import { poolsBySchedule } from "./Schedules";

describe("the schedules list", () => {
  it("names the pools that use each schedule", () => {
    const users = poolsBySchedule([
      { name: "lab", schedule_id: "s1" },
      { name: "office", schedule_id: null },
      { name: "exam", schedule_id: "s1" },
      { name: "night", schedule_id: "s2" },
    ]);
    expect(users.get("s1")).toEqual(["lab", "exam"]);
    expect(users.get("s2")).toEqual(["night"]);
    expect(users.has("s3")).toBe(false);
  });
});
