import { describe, expect, it } from "vitest";
import { axisTooltip, axisTooltipOption, plain } from "./tooltip";

describe("the report charts' tooltip", () => {
  it("says the axis value and each series' value, without any style attribute", () => {
    const html = axisTooltip(
      [
        { axisValueLabel: "2026-01-10 08:00", seriesName: "Peak", value: 3 },
        { axisValueLabel: "2026-01-10 08:00", seriesName: "Mean", value: 1.58333 },
        { axisValueLabel: "2026-01-10 08:00", seriesName: "Median", value: null },
      ],
      plain,
    );
    expect(html).toBe("<strong>2026-01-10 08:00</strong><br/>Peak: 3<br/>Mean: 1.583");
    expect(html).not.toMatch(/style=/);
  });

  it("escapes what it is given and leaves out the series it is told to", () => {
    const html = axisTooltip(
      [
        { axisValue: "stopped: <b>x</b>", seriesName: "from the request", value: 12 },
        { axisValue: "stopped: <b>x</b>", seriesName: "seconds", value: 0 },
      ],
      (value) => `${value} s`,
      ["from the request"],
    );
    expect(html).toBe("<strong>stopped: &#60;b&#62;x&#60;/b&#62;</strong><br/>seconds: 0 s");
  });

  it("takes one item as well as a list, and nothing gives nothing", () => {
    expect(axisTooltip({ axisValue: "a", seriesName: "s", value: [0, 2] }, plain)).toBe("<strong>a</strong><br/>s: 2");
    expect(axisTooltip([], plain)).toBe("");
    expect(axisTooltipOption(plain).formatter([{ axisValue: "h", seriesName: "n", value: 1 }])).toBe("<strong>h</strong><br/>n: 1");
  });
});
