/** Cursor-paginated lists of the API (`items` + `next`), fetched page by page. */
import { useInfiniteQuery, type QueryKey } from "@tanstack/react-query";

export interface Page<T> {
  items: T[];
  next?: string | null;
}

export const PAGE_SIZE = 500;

export function useCursorList<T>(key: QueryKey, fetchPage: (cursor: string | undefined) => Promise<Page<T>>) {
  const query = useInfiniteQuery({
    queryKey: key,
    queryFn: ({ pageParam }) => fetchPage(pageParam),
    initialPageParam: undefined as string | undefined,
    getNextPageParam: (last) => last.next ?? undefined,
  });
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
  return { rows, error: query.error, table };
}
