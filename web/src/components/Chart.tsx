/**
 * The console's one chart component: Apache ECharts (canvas renderer) behind a React element.
 *
 * Every chart of the console (reports, capacity, the dashboard, logon phases) goes through this
 * component, so there is one charting library, loaded once and only on pages that draw a chart:
 * ECharts is imported on first use (its own chunk), not with the console's first page.
 * The canvas renderer is used because the console runs under `style-src 'self'`: ECharts styles
 * its canvas through the CSSOM, which that policy allows.
 *
 * The figure also carries a text summary (`label`) for screen readers and tests; the canvas is
 * `aria-hidden`.
 */
import { useEffect, useRef, useState } from "react";
import type { ComposeOption } from "echarts/core";
import type { BarSeriesOption, LineSeriesOption } from "echarts/charts";
import type {
  DataZoomComponentOption,
  GridComponentOption,
  LegendComponentOption,
  MarkAreaComponentOption,
  MarkLineComponentOption,
  TitleComponentOption,
  TooltipComponentOption,
} from "echarts/components";

/** What a chart may be given: line and bar series with axes, legend, tooltip, zoom and marks. */
export type ChartOption = ComposeOption<
  | BarSeriesOption
  | LineSeriesOption
  | DataZoomComponentOption
  | GridComponentOption
  | LegendComponentOption
  | MarkAreaComponentOption
  | MarkLineComponentOption
  | TitleComponentOption
  | TooltipComponentOption
>;

type EChartsModule = typeof import("echarts/core");

let loading: Promise<EChartsModule> | undefined;

/** ECharts with the parts the console uses, registered once. */
function loadECharts(): Promise<EChartsModule> {
  loading ??= Promise.all([
    import("echarts/core"),
    import("echarts/charts"),
    import("echarts/components"),
    import("echarts/renderers"),
  ]).then(([core, charts, components, renderers]) => {
    core.use([
      charts.BarChart,
      charts.LineChart,
      components.DataZoomComponent,
      components.GridComponent,
      components.LegendComponent,
      components.MarkAreaComponent,
      components.MarkLineComponent,
      components.TitleComponent,
      components.TooltipComponent,
      renderers.CanvasRenderer,
    ]);
    return core;
  });
  return loading;
}

export interface ChartProps {
  /** The ECharts option: series, axes and the rest. Replaced (not merged) on change. */
  option: ChartOption;
  /** A sentence that says what the chart shows, for screen readers and tests. */
  label: string;
  /** The caption under the chart. */
  caption?: string;
  /** CSS height of the drawing area. */
  height?: string;
  /** A `data-testid` for the figure. */
  testId?: string;
}

/** One chart: a figure with a canvas drawn by ECharts and a caption. */
export function Chart({ option, label, caption, height = "16rem", testId }: ChartProps) {
  const host = useRef<HTMLDivElement>(null);
  const chart = useRef<ReturnType<EChartsModule["init"]> | null>(null);
  const [failed, setFailed] = useState(false);

  useEffect(() => {
    let disposed = false;
    const element = host.current;
    if (!element) return undefined;
    const observer = new ResizeObserver(() => chart.current?.resize());
    loadECharts().then(
      (echarts) => {
        if (disposed) return;
        chart.current = echarts.init(element, undefined, { renderer: "canvas" });
        chart.current.setOption(option, { notMerge: true });
        observer.observe(element);
      },
      () => setFailed(true),
    );
    return () => {
      disposed = true;
      observer.disconnect();
      chart.current?.dispose();
      chart.current = null;
    };
    // The chart is created once per mount; option changes are applied by the effect below.
  }, []);

  useEffect(() => {
    chart.current?.setOption(option, { notMerge: true });
  }, [option]);

  return (
    <figure className="chart" data-testid={testId}>
      <div ref={host} className="chart-canvas" style={{ height, width: "100%" }} role="img" aria-label={label} />
      {failed ? <p role="alert">The chart could not be drawn.</p> : null}
      {caption ? <figcaption>{caption}</figcaption> : null}
    </figure>
  );
}
