/**
 * A table that stays fast with thousands of rows: only the visible rows are in the DOM
 * (@tanstack/react-virtual, spacer rows keep it a real <table>), and the next page of the API's
 * cursor is fetched as the end comes into view.
 */
import { useVirtualizer, type Virtualizer } from "@tanstack/react-virtual";
import { useEffect, useRef, type ReactNode } from "react";

/**
 * The scroller's size from a ResizeObserver only. The library's default also reads
 * getBoundingClientRect in a layout effect, which forces a layout of the whole page before the
 * rows are even rendered; the observer reports after the browser's own layout instead.
 */
export function observeSize(instance: Virtualizer<HTMLDivElement, Element>, report: (rect: { width: number; height: number }) => void) {
  const element = instance.scrollElement;
  if (!element) return;
  const observer = new ResizeObserver(([entry]) => {
    const box = entry?.borderBoxSize?.[0];
    if (box) report({ width: Math.round(box.inlineSize), height: Math.round(box.blockSize) });
  });
  observer.observe(element, { box: "border-box" });
  return () => observer.disconnect();
}

export interface Column<T> {
  header: string;
  cell: (row: T) => ReactNode;
  className?: string;
}

interface Props<T> {
  caption: string;
  columns: Column<T>[];
  rows: T[];
  rowKey: (row: T) => string | number;
  hasMore?: boolean;
  loadMore?: () => void;
  loading?: boolean;
  empty?: ReactNode;
  rowHeight?: number;
}

export function DataTable<T>({
  caption,
  columns,
  rows,
  rowKey,
  hasMore,
  loadMore,
  loading,
  empty,
  rowHeight = 44,
}: Props<T>) {
  const scroller = useRef<HTMLDivElement>(null);
  const virtualizer = useVirtualizer({
    count: rows.length,
    getScrollElement: () => scroller.current,
    estimateSize: () => rowHeight,
    overscan: 12,
    initialRect: { width: 1000, height: 600 },
    observeElementRect: observeSize,
  });
  const items = virtualizer.getVirtualItems();
  const last = items.length ? items[items.length - 1]!.index : -1;
  useEffect(() => {
    if (hasMore && !loading && loadMore && last >= rows.length - 20) loadMore();
  }, [hasMore, loading, loadMore, last, rows.length]);
  const top = items.length ? items[0]!.start : 0;
  const bottom = items.length ? virtualizer.getTotalSize() - items[items.length - 1]!.end : 0;
  return (
    <div className="table-scroller" ref={scroller} tabIndex={0} role="region" aria-label={caption}>
      <table className="striped">
        <caption className="visually-hidden">{caption}</caption>
        <thead>
          <tr>
            {columns.map((column) => (
              <th key={column.header} scope="col" className={column.className}>
                {column.header}
              </th>
            ))}
          </tr>
        </thead>
        <tbody>
          {top > 0 ? (
            <tr aria-hidden="true" style={{ height: top }}>
              <td colSpan={columns.length} />
            </tr>
          ) : null}
          {items.map((item) => {
            const row = rows[item.index]!;
            return (
              <tr key={rowKey(row)} data-index={item.index} style={{ height: rowHeight }}>
                {columns.map((column) => (
                  <td key={column.header} className={column.className}>
                    {column.cell(row)}
                  </td>
                ))}
              </tr>
            );
          })}
          {bottom > 0 ? (
            <tr aria-hidden="true" style={{ height: bottom }}>
              <td colSpan={columns.length} />
            </tr>
          ) : null}
        </tbody>
      </table>
      {!rows.length && !loading ? <p className="empty">{empty ?? "Nothing here yet."}</p> : null}
      {loading ? <p aria-busy="true">Loading…</p> : null}
    </div>
  );
}
