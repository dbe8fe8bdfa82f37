import { describe, expect, it } from "vitest";
import { allPages, countText, FIRST_PAGE_SIZE, grouped, PAGE_SIZE, pageSize } from "./lists";

describe("cursor lists", () => {
  it("asks a small first page, then the API's largest", () => {
    expect(pageSize(undefined)).toBe(FIRST_PAGE_SIZE);
    expect(pageSize("abc")).toBe(PAGE_SIZE);
    expect(PAGE_SIZE).toBe(500);
  });

  it("groups thousands", () => {
    expect(grouped(0)).toBe("0");
    expect(grouped(999)).toBe("999");
    expect(grouped(1000)).toBe("1,000");
    expect(grouped(1234567)).toBe("1,234,567");
  });

  it("says when more rows remain", () => {
    expect(countText(1000, true, "pools")).toBe("1,000 pools");
    expect(countText(100, false, "pools")).toBe("100 pools loaded; more load as you scroll");
  });
});

describe("allPages", () => {
  it("follows the cursors to the last page with the largest pages", async () => {
    const asked: Array<[string | undefined, number]> = [];
    const items = await allPages(async (cursor, limit) => {
      asked.push([cursor, limit]);
      return cursor === undefined ? { items: [1, 2], next: "b" } : { items: [3], next: null };
    });
    expect(items).toEqual([1, 2, 3]);
    expect(asked).toEqual([
      [undefined, PAGE_SIZE],
      ["b", PAGE_SIZE],
    ]);
  });
});
