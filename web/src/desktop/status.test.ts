import { describe, expect, it } from "vitest";
import { describeStatus, STATUS_TEXT } from "./status";

describe("describeStatus", () => {
  it("says a hang-up lost the connection, that the desktop is kept, and to reconnect", () => {
    const lost = describeStatus(0x0203);
    expect(lost.title).toBe("Desktop connection lost");
    expect(lost.advice).toMatch(/connection to your desktop was lost/);
    expect(lost.advice).toMatch(/Reconnect/);
    expect(lost.kept).toBe(true);
  });

  it("words every status with what to do, never a bare code", () => {
    for (const [code, text] of Object.entries(STATUS_TEXT)) {
      expect(text.title.length, code).toBeGreaterThan(3);
      expect(text.advice, code).toMatch(/Reconnect|My desktops|administrator/);
      expect(text.advice, code).not.toMatch(/^\d+$/);
    }
    expect(describeStatus(0x0303).advice).toMatch(/no longer allowed/);
    expect(describeStatus(0x0202).advice).toMatch(/sign-in was refused/);
  });

  it("still says something useful for a status it does not know", () => {
    const other = describeStatus(0x0999);
    expect(other.title).toBe("Connection lost");
    expect(other.advice).toContain(`status ${0x0999}`);
    expect(other.advice).toMatch(/Reconnect/);
  });
});
