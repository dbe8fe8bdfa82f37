import { QueryClient, QueryClientProvider } from "@tanstack/react-query";
import { renderToStaticMarkup } from "react-dom/server";
import { describe, expect, it } from "vitest";
import type { Schemas } from "../api/client";
import { SessionContext, type Session } from "../session";
import { ScheduleEditor } from "./ScheduleEditor";

const SCHEDULE: Schemas["Schedule"] = {
  id: "s1",
  name: "Berlin office",
  time_zone: "Europe/Berlin",
  phases: [
    { name: "peak", days: ["mon", "fri"], start: "07:00", min_ready: 50, min_ready_unit: "percent", spare: 2, idle: "keep", logoff: null },
    {
      name: "off-peak",
      days: ["mon", "fri"],
      start: "19:00",
      min_ready: 0,
      min_ready_unit: "count",
      spare: 1,
      idle: "power_off",
      logoff: { scope: "disconnected", wait_seconds: 600, message: "Please save your work" },
    },
  ],
  exceptions: [{ name: "christmas", first: "2026-12-24", last: "2026-12-26", phase: "off-peak", settings: null }],
  generation: 1,
  in_force: null,
  created_at: "2026-11-23T00:00:00Z",
  updated_at: "2026-11-23T00:00:00Z",
};

function render(schedule?: Schemas["Schedule"], readOnly = false): string {
  return renderToStaticMarkup(
    <QueryClientProvider client={new QueryClient()}>
      <SessionContext.Provider value={{ api: {} } as unknown as Session}>
        <ScheduleEditor schedule={schedule} readOnly={readOnly} />
      </SessionContext.Provider>
    </QueryClientProvider>,
  );
}

describe("the schedule editor", () => {
  it("starts a new schedule with two phases on working days and suggests time zones", () => {
    const html = render();
    expect(html).toContain('aria-label="New schedule"');
    expect(html.match(/data-testid="phase"/g)).toHaveLength(2);
    expect(html.match(/<input type="checkbox" aria-label="(Monday|Tuesday|Wednesday|Thursday|Friday)" checked=""/g)).toHaveLength(10);
    expect(html).not.toMatch(/aria-label="(Saturday|Sunday)" checked=""/);
    expect(html).toContain('<option value="Europe/Berlin">');
    expect(html).toContain(">Add a phase</button>");
    expect(html).toContain(">Add an exception</button>");
    expect(html).toContain(">Create the schedule</button>");
    expect(html).toContain("Preview of a week");
  });

  it("shows a schedule's phases, log-off and exceptions", () => {
    const html = render(SCHEDULE);
    expect(html).toContain('aria-label="Schedule Berlin office"');
    expect(html).toMatch(/type="time"[^>]*value="19:00"/);
    expect(html).toMatch(/<option value="percent" selected="">/);
    expect(html).toMatch(/value="Please save your work"/);
    expect(html).toMatch(/type="date"[^>]*value="2026-12-26"/);
    expect(html).toMatch(/<option value="off-peak" selected="">off-peak<\/option>/);
    expect(html).toContain(">Save the schedule</button>");
  });

  it("is read-only for those who may only read schedules", () => {
    const html = render(SCHEDULE, true);
    expect(html).toMatch(/<fieldset disabled=""/);
    expect(html).not.toContain("Save the schedule");
    expect(html).not.toContain("Add a phase");
    expect(html).not.toContain("Remove phase");
    // The preview stays: reading a schedule is seeing its week.
    expect(html).toContain("Preview of a week");
  });
});
