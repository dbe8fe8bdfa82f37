/**
 * A session's transfers under its pool's client policy: each clipboard transfer, file, print job
 * and refused stream the gateway saw (direction, size, name, SHA-256, allowed, cut or refused and
 * why). The content itself is never stored.
 */
import { useQuery } from "@tanstack/react-query";
import { unwrap } from "../api/client";
import { Badge } from "../components/Badge";
import { ProblemAlert } from "../components/Problem";
import { bytes, when, words } from "../format";
import { useSession } from "../session";

export function SessionTransfers({ sessionId, open }: { sessionId: string; open: boolean }) {
  const { api } = useSession();
  const transfers = useQuery({
    queryKey: ["session", sessionId, "transfers"],
    refetchInterval: open ? 5000 : false,
    queryFn: () => unwrap(api.GET("/api/v1/sessions/{session_id}/transfers", { params: { path: { session_id: sessionId } } })),
  });
  if (transfers.error) return <ProblemAlert error={transfers.error} />;
  const items = transfers.data?.items ?? [];
  return (
    <section aria-labelledby="transfers-title">
      <h2 id="transfers-title">Transfers</h2>
      {!transfers.data ? (
        <p aria-busy="true">Loading…</p>
      ) : items.length === 0 ? (
        <p>No clipboard transfer, file or print job crossed, and nothing was refused.</p>
      ) : (
        <table data-testid="session-transfers">
          <caption>Clipboard, files and print jobs: what crossed, and what the client policy refused (never the content)</caption>
          <thead>
            <tr>
              <th scope="col">When</th>
              <th scope="col">What</th>
              <th scope="col">Direction</th>
              <th scope="col">Size</th>
              <th scope="col">Outcome</th>
              <th scope="col">SHA-256</th>
            </tr>
          </thead>
          <tbody>
            {items.map((item, index) => (
              <tr key={`${item.at}-${index}`}>
                <td>{when(item.at)}</td>
                <td>
                  {words(item.kind)}
                  {item.name ? `: ${item.name}` : ""}
                </td>
                <td>{item.direction === "to_desktop" ? "to the desktop" : "to the browser"}</td>
                <td>
                  {bytes(item.size)}
                  {item.delivered !== item.size ? ` (${bytes(item.delivered)} delivered)` : ""}
                </td>
                <td>
                  <Badge value={item.outcome} />
                  {item.reason ? ` ${words(item.reason)}` : ""}
                </td>
                <td>
                  <code title={item.sha256}>{item.sha256.slice(0, 16)}…</code>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  );
}
