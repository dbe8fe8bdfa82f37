/**
 * A server-sent events reader over fetch (the browser's EventSource cannot send the bearer
 * token). It parses the text/event-stream format (WHATWG HTML §9.2), remembers the last event
 * id and reconnects with Last-Event-ID, so no event is missed across a drop.
 */

export interface ServerEvent {
  id: string;
  event: string;
  data: string;
}

/** Incremental parser: feed text chunks, get complete events. */
export class EventStreamParser {
  private buffer = "";
  private data: string[] = [];
  private event = "";
  private id: string | null = null;
  /** The last event id seen (kept across events, as the standard says). */
  lastEventId = "";
  /** A `retry:` field, in milliseconds. */
  retry: number | null = null;

  feed(chunk: string): ServerEvent[] {
    this.buffer += chunk;
    const events: ServerEvent[] = [];
    let index: number;
    while ((index = this.buffer.search(/\r\n|\r|\n/)) >= 0) {
      const line = this.buffer.slice(0, index);
      const newline = this.buffer.startsWith("\r\n", index) ? 2 : 1;
      // A lone \r at the very end may be the first half of \r\n: wait for more.
      if (this.buffer[index] === "\r" && index === this.buffer.length - 1) break;
      this.buffer = this.buffer.slice(index + newline);
      const event = this.line(line);
      if (event) events.push(event);
    }
    return events;
  }

  private line(line: string): ServerEvent | null {
    if (line === "") {
      if (this.id !== null) this.lastEventId = this.id;
      this.id = null;
      if (!this.data.length) {
        this.event = "";
        return null;
      }
      const event = { id: this.lastEventId, event: this.event || "message", data: this.data.join("\n") };
      this.data = [];
      this.event = "";
      return event;
    }
    if (line.startsWith(":")) return null;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "data") this.data.push(value);
    else if (field === "event") this.event = value;
    else if (field === "id" && !value.includes("\0")) this.id = value;
    else if (field === "retry" && /^\d+$/.test(value)) this.retry = Number(value);
    return null;
  }
}

export interface StreamOptions {
  url: string;
  getToken: () => Promise<string | null>;
  onEvent: (event: ServerEvent) => void;
  onState?: (state: "connecting" | "open" | "closed") => void;
  signal: AbortSignal;
  /** Delay before reconnecting, in ms, unless the server sent `retry:`. */
  retryMs?: number;
  fetcher?: typeof fetch;
  /** Resume after this event id (a tab taking the stream over from another). */
  lastEventId?: string;
}

/** Read the stream until `signal` aborts, reconnecting with Last-Event-ID after every drop. */
export async function readEventStream(options: StreamOptions): Promise<void> {
  const fetcher = options.fetcher ?? fetch;
  let lastEventId = options.lastEventId ?? "";
  let retry = options.retryMs ?? 2000;
  while (!options.signal.aborted) {
    let wait = retry;
    options.onState?.("connecting");
    const parser = new EventStreamParser();
    try {
      const headers: Record<string, string> = { Accept: "text/event-stream" };
      const token = await options.getToken();
      if (token) headers.Authorization = `Bearer ${token}`;
      if (lastEventId) headers["Last-Event-ID"] = lastEventId;
      const response = await fetcher(options.url, { headers, signal: options.signal, cache: "no-store" });
      if (!response.ok || !response.body) {
        wait = retryAfter(response) ?? retry;
        throw new Error(`the event stream answered ${response.status}`);
      }
      options.onState?.("open");
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        for (const event of parser.feed(value)) {
          lastEventId = event.id || lastEventId;
          options.onEvent(event);
        }
        if (parser.retry !== null) retry = parser.retry;
      }
      wait = retry;
    } catch (error) {
      if (options.signal.aborted) break;
    }
    options.onState?.("closed");
    if (options.signal.aborted) break;
    await new Promise((resolve) => setTimeout(resolve, wait));
  }
}

/** A refusal's Retry-After (429 too many streams, 503), in ms, between 1 and 60 s; else null. */
export function retryAfter(response: Response): number | null {
  const header = response.headers.get("Retry-After");
  if (!header || !/^\d+$/.test(header.trim())) return null;
  return Math.min(60, Math.max(1, Number(header))) * 1000;
}
