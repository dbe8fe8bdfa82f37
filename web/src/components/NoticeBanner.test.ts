import { describe, expect, it } from "vitest";
import { bodyOf } from "../pages/Rollouts";
import { startStep } from "../pages/DesktopView";
import { countdown, WHY } from "./NoticeBanner";

describe("countdown", () => {
  it("shows minutes and seconds left, never below zero", () => {
    expect(countdown(245)).toBe("4:05");
    expect(countdown(4.2)).toBe("0:05");
    expect(countdown(-3)).toBe("0:00");
  });
});

describe("a rollout's request body", () => {
  it("leaves blank optional fields to the API's defaults", () => {
    const body = bodyOf({
      template: "9001",
      canary: "1",
      batch_size: "2",
      min_ready: "",
      surge: "0",
      in_use: "force_logoff",
      warning_seconds: "5",
      message: "New image",
      start_at: "",
      stop_on_error: true,
      recreate_assigned: false,
    });
    expect(body).toEqual({
      template: "9001",
      canary: 1,
      batch_size: 2,
      surge: 0,
      in_use: "force_logoff",
      warning_seconds: 5,
      message: "New image",
      stop_on_error: true,
      recreate_assigned: false,
    });
    expect("min_ready" in body).toBe(false);
  });
});

describe("why a session ends", () => {
  it("has a sentence for each reason deskpool warns with", () => {
    expect(WHY.image_rollout).toMatch(/new image/);
    expect(WHY.capacity_schedule).toMatch(/capacity schedule/);
  });
});

describe("the steps of a desktop started for the user", () => {
  it("follows the desktop's states to ready", () => {
    expect(startStep("powered_off")).toBe(0);
    expect(startStep("starting")).toBe(1);
    expect(startStep("waiting_for_agent")).toBe(2);
    expect(startStep("waiting_for_windows")).toBe(2);
    expect(startStep("in_use")).toBe(3);
    expect(startStep("something new")).toBe(0);
  });
});
