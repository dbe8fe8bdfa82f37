import { describe, expect, it } from "vitest";
import { csvFileName, slug } from "./csv";

const period = { from: "2026-01-10T08:00:00.000Z", to: "2026-01-11T08:00:00+00:00" };

describe("the CSV file's name", () => {
  it("says the scope, the bucket and the period in UTC", () => {
    expect(csvFileName(period, "hour", null)).toBe("deskpool-usage-all-pools-hour-20260110T0800Z-20260111T0800Z.csv");
    expect(csvFileName(period, "day", "Finance Desktops (EU)")).toBe(
      "deskpool-usage-finance-desktops-eu-day-20260110T0800Z-20260111T0800Z.csv",
    );
  });

  it("keeps only safe characters of a pool name", () => {
    expect(slug("../../etc/passwd")).toBe("etc-passwd");
    expect(slug("***")).toBe("pool");
  });
});
