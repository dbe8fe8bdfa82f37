import { describe, expect, it } from "vitest";
import { NO_FILTERS, PlaybackClock, SPEEDS, clockText, instant, recordedSeconds, recordingQuery } from "./player";

describe("clockText", () => {
  it("reads minutes and seconds, then hours", () => {
    expect(clockText(0)).toBe("0:00");
    expect(clockText(999)).toBe("0:00");
    expect(clockText(61_500)).toBe("1:01");
    expect(clockText(3_600_000 + 5 * 60_000 + 7_000)).toBe("1:05:07");
    expect(clockText(-5)).toBe("0:00");
  });
});

describe("PlaybackClock", () => {
  it("stands still until played, then moves with the time", () => {
    const clock = new PlaybackClock(10_000);
    expect(clock.position(5_000)).toBe(0);
    clock.play(1_000);
    expect(clock.playing).toBe(true);
    expect(clock.position(3_500)).toBe(2_500);
    clock.pause(4_000);
    expect(clock.playing).toBe(false);
    expect(clock.position(9_000)).toBe(3_000);
  });

  it("plays faster at 2x and 4x from where the speed changed", () => {
    expect(SPEEDS).toEqual([1, 2, 4]);
    const clock = new PlaybackClock(60_000);
    clock.play(0);
    clock.setSpeed(2, 1_000); // 1 s at 1x
    expect(clock.position(2_000)).toBe(3_000); // + 1 s at 2x
    clock.setSpeed(4, 2_000);
    expect(clock.position(3_000)).toBe(7_000); // + 1 s at 4x
    expect(clock.speed).toBe(4);
  });

  it("stops at the end, and plays from the start again", () => {
    const clock = new PlaybackClock(2_000);
    clock.play(0);
    expect(clock.ended(1_999)).toBe(false);
    expect(clock.ended(2_500)).toBe(true);
    expect(clock.position(9_000)).toBe(2_000);
    clock.pause(9_000);
    clock.play(10_000);
    expect(clock.position(10_500)).toBe(500);
  });

  it("seeks within the recording, playing on or paused", () => {
    const clock = new PlaybackClock(10_000);
    clock.seek(4_000, 0);
    expect(clock.position(1_000)).toBe(4_000);
    clock.play(1_000);
    clock.seek(8_000, 2_000);
    expect(clock.position(3_000)).toBe(9_000);
    clock.seek(-50, 3_000);
    expect(clock.position(3_000)).toBe(0);
    clock.seek(99_000, 3_000);
    expect(clock.position(3_000)).toBe(10_000);
  });

  it("does not play an empty recording, and follows one that grows", () => {
    const clock = new PlaybackClock();
    clock.play(0);
    expect(clock.playing).toBe(false);
    clock.setDuration(1_000, 0);
    clock.play(0);
    expect(clock.position(5_000)).toBe(1_000);
    clock.setDuration(8_000, 5_000); // more of it loaded: playing goes on from where it stood
    expect(clock.position(6_000)).toBe(2_000);
    expect(clock.duration).toBe(8_000);
  });
});

describe("recordingQuery", () => {
  const id = "0b9f3c1e-6f0e-4a55-9d3b-2f1f4f1d8a77";

  it("sends nothing for no filter", () => {
    expect(recordingQuery(NO_FILTERS)).toEqual({ query: {}, errors: {} });
  });

  it("sends the ids filled in, and refuses what is not an id", () => {
    const { query, errors } = recordingQuery({ ...NO_FILTERS, pool_id: ` ${id.toUpperCase()} `, user_id: "bob", session_id: id });
    expect(query).toEqual({ pool_id: id, session_id: id });
    expect(errors).toEqual({ user_id: "Not an id (a UUID)." });
  });

  it("sends the period as instants with an offset, and refuses an empty one", () => {
    const since = "2026-03-01T08:00";
    const { query } = recordingQuery({ ...NO_FILTERS, since, until: "2026-03-01T09:30" });
    expect(query.since).toBe(new Date(since).toISOString());
    expect(query.until).toMatch(/Z$/);
    const backwards = recordingQuery({ ...NO_FILTERS, since: "2026-03-02T00:00", until: "2026-03-01T00:00" });
    expect(backwards.query.until).toBeUndefined();
    expect(backwards.errors.until).toBe("Must be after From.");
  });

  it("reads only datetime-local values", () => {
    expect(instant("2026-03-01T08:00:30")).toBe(new Date("2026-03-01T08:00:30").toISOString());
    expect(instant("yesterday")).toBeNull();
    expect(instant("2026-13-45T99:99")).toBeNull();
  });
});

describe("recordedSeconds", () => {
  it("is the length of an ended recording, null while recorded", () => {
    expect(recordedSeconds("2026-03-01T08:00:00Z", "2026-03-01T08:01:30Z")).toBe(90);
    expect(recordedSeconds("2026-03-01T08:00:00Z", null)).toBeNull();
  });
});
