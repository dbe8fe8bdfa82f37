/**
 * Queries shared by a page and the prefetch of its route: Boot starts the data of the page the
 * browser opens while it asks the API who the caller is, instead of after (one round trip less).
 */
import { QueryClient } from "@tanstack/react-query";
import { unwrap, type Api } from "./client";
import { cursorListOptions, pageSize } from "./lists";
import { ApiError } from "./problem";

export function newQueryClient(): QueryClient {
  return new QueryClient({
    defaultOptions: {
      queries: {
        staleTime: 10_000,
        refetchOnWindowFocus: false,
        // A problem the API answered (403, 404, 422...) will not change on retry; a network error may.
        retry: (count, error) => !(error instanceof ApiError) && count < 2,
      },
    },
  });
}

/** The pools list (name order): its key and the page after a cursor. */
export const POOL_LIST = ["pools", "list"] as const;
export function poolPages(api: Api) {
  return (cursor: string | undefined) =>
    unwrap(api.GET("/api/v1/pools", { params: { query: { limit: pageSize(cursor), cursor } } }));
}

/** Start fetching what the page at `path` shows first (no-op for pages without a prefetch). */
export function prefetchRoute(path: string, api: Api, client: QueryClient): void {
  if (path === "/pools" || path === "/pools/") void client.prefetchInfiniteQuery(cursorListOptions(POOL_LIST, poolPages(api)));
}
