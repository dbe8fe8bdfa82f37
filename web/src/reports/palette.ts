/**
 * The colours of the console's report charts, one per kind of figure, so the same figure has
 * the same colour on every page (and a browser test can find a series by its colour).
 */
export const COLORS = {
  primary: "#1c7ed6",
  secondary: "#f08c00",
  tertiary: "#2f9e44",
  failure: "#e03131",
  muted: "#868e96",
} as const;

/** Colours for series without one of their own (failure reasons), in order. */
export const SEQUENCE = ["#e03131", "#f08c00", "#ae3ec9", "#1098ad", "#5c940d", "#862e9c", "#d9480f", "#364fc7"];
