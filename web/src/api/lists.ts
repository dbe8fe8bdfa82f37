/**
 * Cursor-paginated lists of the API (`items` + `next`), fetched page by page.
 *
 * The first page is small so the first screen of a long list renders at once; the pages after
 * it are the API's largest (`API_PAGE_SIZE_MAX`), fetched as the end of the table comes into
 * view (see DataTable).
 */
import { infiniteQueryOptions, useInfiniteQuery, type QueryKey } from "@tanstack/react-query";

export interface Page<T> {
  items: T[];
  next?: string | null;
}

/** Rows of the first page: a screenful and some. */
export const FIRST_PAGE_SIZE = 100;
/** Rows of each later page: the API's default `API_PAGE_SIZE_MAX`. */
export const PAGE_SIZE = 500;

/** The `limit` of the page after `cursor` (none: the first page). */
export function pageSize(cursor: string | undefined): number {
  return cursor === undefined ? FIRST_PAGE_SIZE : PAGE_SIZE;
}

/** The query of a cursor list, shared by the page that shows it and the prefetch of its route. */
export function cursorListOptions<T>(key: QueryKey, fetchPage: (cursor: string | undefined) => Promise<Page<T>>) {
  return infiniteQueryOptions({
    queryKey: key,
    queryFn: ({ pageParam }) => fetchPage(pageParam),
    initialPageParam: undefined as string | undefined,
    getNextPageParam: (last: Page<T>) => last.next ?? undefined,
  });
}

export function useCursorList<T>(key: QueryKey, fetchPage: (cursor: string | undefined) => Promise<Page<T>>) {
  const query = useInfiniteQuery(cursorListOptions(key, fetchPage));
  const rows = query.data?.pages.flatMap((page) => page.items) ?? [];
  /** What a DataTable needs: `<DataTable {...list.table} ... />`. */
  const table = {
    rows,
    loading: query.isLoading || query.isFetchingNextPage,
    hasMore: query.hasNextPage,
    loadMore: () => {
      if (!query.isFetchingNextPage) void query.fetchNextPage();
    },
  };
  return { rows, error: query.error, table, complete: query.isSuccess && !query.hasNextPage };
}

/** Every item of a cursor list, page after page of the API's largest (for totals, not tables). */
export async function allPages<T>(fetchPage: (cursor: string | undefined, limit: number) => Promise<Page<T>>): Promise<T[]> {
  const items: T[] = [];
  let cursor: string | undefined;
  do {
    const page = await fetchPage(cursor, PAGE_SIZE);
    items.push(...page.items);
    cursor = page.next ?? undefined;
  } while (cursor !== undefined);
  return items;
}

/** 1234567 as "1,234,567" (not toLocaleString: its first call loads locale data, ~50 ms). */
export function grouped(count: number): string {
  return String(count).replace(/\B(?=(\d{3})+$)/g, ",");
}

/** "1,000 pools", or "100 pools loaded; ..." while more pages remain. */
export function countText(count: number, complete: boolean, noun: string): string {
  const number = grouped(count);
  return complete ? `${number} ${noun}` : `${number} ${noun} loaded; more load as you scroll`;
}
