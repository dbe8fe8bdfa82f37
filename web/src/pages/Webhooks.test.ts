import { describe, expect, it } from "vitest";
import { ApiError } from "../api/problem";
import { eventTypes, webhookErrors } from "./Webhooks";

describe("the webhook form", () => {
  it("reads event types separated by commas or spaces", () => {
    expect(eventTypes(" audit.pool.*,session.started  *, ")).toEqual(["audit.pool.*", "session.started", "*"]);
  });

  it("says an event type's error at the list, and a taken name at the name", () => {
    const invalid = new ApiError({
      status: 422,
      errors: [{ pointer: "/event_types/1", detail: "is not a known event type" }],
    });
    expect(webhookErrors(invalid).event_types).toBe("It is not a known event type.");
    const taken = new ApiError({ status: 409, code: "webhook_name_taken", detail: "A webhook named siem exists." });
    expect(webhookErrors(taken).name).toBe("A webhook named siem exists.");
  });
});
