import { describe, expect, it } from "vitest";
import { connectData, fitScale } from "./guacamole";

describe("fitScale", () => {
  it("shrinks a desktop larger than the view so that all of it shows", () => {
    // The 1280x800 screen in a 1280x765 view (the bar takes 35 px): scaled by the height.
    const scale = fitScale(1280, 800, 1280, 765);
    expect(scale).toBeCloseTo(765 / 800);
    expect(1280 * scale!).toBeLessThanOrEqual(1280);
    expect(800 * scale!).toBeLessThanOrEqual(765);
  });

  it("is 1 when the desktop has the view's size, and fits by the tighter side", () => {
    expect(fitScale(1024, 768, 1024, 768)).toBe(1);
    expect(fitScale(2000, 1000, 1000, 1000)).toBe(0.5);
  });

  it("has no scale for an empty display or view", () => {
    expect(fitScale(0, 0, 800, 600)).toBeNull();
    expect(fitScale(800, 600, 0, 600)).toBeNull();
  });
});

describe("connectData", () => {
  it("carries the token and the view's size", () => {
    const data = new URLSearchParams(connectData("tok", 1279.6, 765.2));
    expect(data.get("token")).toBe("tok");
    expect(data.get("width")).toBe("1280");
    expect(data.get("height")).toBe("765");
    expect(data.getAll("image")).toEqual(["image/png", "image/jpeg", "image/webp"]);
  });
});
