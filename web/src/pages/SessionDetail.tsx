/**
 * One session: its facts, its logon's phases as a waterfall (why it took so long, or stopped),
 * and, while it is open, Disconnect and Log off (asked first, naming the user, with an optional
 * message to him) and Watch.
 */
import { useQuery } from "@tanstack/react-query";
import { useMemo, type ReactNode } from "react";
import { Link, useNavigate, useParams } from "react-router";
import { unwrap, type Schemas } from "../api/client";
import { can } from "../auth/permissions";
import { PoolName, UserName } from "../components/Names";
import { Badge } from "../components/Badge";
import { Chart } from "../components/Chart";
import { ProblemAlert } from "../components/Problem";
import { disconnectable, useSessionActions } from "../components/SessionActions";
import { bytes, when, words } from "../format";
import { waterfallLabel, waterfallOption, waterfallRows } from "../reports/logon";
import { seconds } from "../reports/usage";
import { SessionRecordingLink } from "../recordings/SessionRecordingLink";
import { useSession } from "../session";
import { SessionTransfers } from "./SessionTransfers";

function Logon({ logon }: { logon: Schemas["Logon"] }) {
  const rows = useMemo(() => waterfallRows(logon), [logon]);
  const option = useMemo(() => waterfallOption(rows), [rows]);
  return (
    <section aria-labelledby="logon-title">
      <h2 id="logon-title">Logon</h2>
      <p data-testid="logon-outcome">
        <Badge value={logon.outcome} />{" "}
        {logon.outcome === "connected"
          ? `First frame ${seconds(logon.duration_seconds)} after the request.`
          : logon.outcome === "failed"
            ? `Stopped ${when(logon.failed_at)}: ${words(logon.failure_reason)}.`
            : "Under way."}
      </p>
      <Chart
        option={option}
        label={waterfallLabel(logon)}
        testId="logon-waterfall"
        height={`${Math.max(rows.length, 3) * 2.2 + 3}rem`}
        caption="Each bar runs from the phase to the next step (seconds since the request)."
      />
      <table data-testid="logon-phases">
        <caption>Phases reached</caption>
        <thead>
          <tr>
            <th scope="col">Phase</th>
            <th scope="col">Reached</th>
            <th scope="col">Since the phase before</th>
          </tr>
        </thead>
        <tbody>
          {logon.phases.map((phase) => (
            <tr key={phase.phase}>
              <th scope="row">{words(phase.phase)}</th>
              <td>{when(phase.at)}</td>
              <td>{seconds(phase.seconds)}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </section>
  );
}

export function SessionDetailPage() {
  const { sessionId = "" } = useParams();
  const { api, me } = useSession();
  const session = useQuery({
    queryKey: ["session", sessionId],
    queryFn: () => unwrap(api.GET("/api/v1/sessions/{session_id}", { params: { path: { session_id: sessionId } } })),
  });
  const actions = useSessionActions();
  const navigate = useNavigate();
  if (session.error) return <ProblemAlert error={session.error} />;
  if (!session.data) return <p aria-busy="true">Loading…</p>;
  const s = session.data;
  const facts: [string, ReactNode][] = [
    ["Desktop", s.desktop_name],
    [
      "Pool",
      can(me, "pools:read") ? (
        <Link to={`/pools/${s.pool_id}`}>
          <PoolName id={s.pool_id} name={s.pool_name} />
        </Link>
      ) : (
        <PoolName id={s.pool_id} name={s.pool_name} />
      ),
    ],
    ["User", <UserName id={s.user_id} name={s.user_name} email={s.user_email} />],
    [
      "Kind",
      s.read_only && s.shadow_of ? (
        <>
          watching <Link to={`/sessions/${s.shadow_of}`}>the watched session</Link>
        </>
      ) : (
        s.protocol
      ),
    ],
    ["Gateway", s.gateway_id],
    ["Started", when(s.started_at)],
    ["Connected", when(s.connected_at)],
    ["Last activity", when(s.last_activity_at)],
    ["Ended", s.ended_at ? `${when(s.ended_at)} (${words(s.end_reason)})` : "—"],
    ["To the desktop", bytes(s.bytes_to_desktop)],
    ["To the browser", bytes(s.bytes_to_browser)],
  ];
  return (
    <section>
      <div className="page-head">
        <h1>Session on {s.desktop_name}</h1>
        <Badge value={s.state} />
      </div>
      <p>
        <Link to="/sessions">All sessions</Link>
      </p>
      {can(me, "sessions:manage") && s.state === "open" ? (
        <div className="toolbar" role="group" aria-label="Session actions">
          <button
            type="button"
            className="secondary"
            disabled={!disconnectable(s)}
            onClick={() => void actions.askDisconnect([s])}
          >
            Disconnect {s.desktop_name}
          </button>
          {s.read_only ? null : (
            <>
              <button type="button" className="secondary" onClick={() => void actions.askLogOff(s)}>
                Log off {s.desktop_name}
              </button>
              <button
                type="button"
                className="secondary"
                disabled={!s.connected_at}
                onClick={() => navigate(`/desktop/${s.desktop_id}?watch=${s.id}`)}
              >
                Watch {s.desktop_name}
              </button>
            </>
          )}
        </div>
      ) : null}
      <ProblemAlert error={actions.error} />
      {actions.dialog}
      <SessionRecordingLink sessionId={s.id} />
      <dl className="facts" data-testid="session-facts">
        {facts.map(([term, value]) => (
          <div key={term}>
            <dt>{term}</dt>
            <dd>{value}</dd>
          </div>
        ))}
      </dl>
      {s.logon ? (
        <Logon logon={s.logon} />
      ) : (
        <p>No logon timing: {s.read_only ? "a read-only view is not a logon." : "the session has none recorded."}</p>
      )}
      <SessionTransfers sessionId={s.id} open={s.state === "open"} />
    </section>
  );
}
