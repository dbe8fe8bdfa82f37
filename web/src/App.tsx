/** The console's routes, inside a signed-in session. */
import { useQuery } from "@tanstack/react-query";
import { Navigate, Route, Routes, useLocation } from "react-router";
import { unwrap } from "./api/client";
import { can, isAdministrator } from "./auth/permissions";
import { Layout } from "./components/Layout";
import { LiveUpdates } from "./live/LiveUpdates";
import { AuditPage } from "./pages/Audit";
import { ClusterDetailPage, ClustersPage } from "./pages/Clusters";
import { DashboardPage } from "./pages/Dashboard";
import { DesktopsPage } from "./pages/Desktops";
import { DesktopViewPage } from "./pages/DesktopView";
import { JobsPage } from "./pages/Jobs";
import { LicensePage } from "./pages/License";
import { MyDesktopsPage } from "./pages/MyDesktops";
import { PeoplePage } from "./pages/People";
import { PoolDetailPage } from "./pages/PoolDetail";
import { NewPoolPage } from "./pages/PoolForm";
import { PoolsPage } from "./pages/Pools";
import { ReportsPage } from "./pages/Reports";
import { RecordingPage, RecordingsPage } from "./pages/Recordings";
import { RolloutsPage } from "./pages/Rollouts";
import { NewSchedulePage, ScheduleDetailPage, SchedulesPage } from "./pages/Schedules";
import { HelpDeskSearchPage, HelpDeskUserPage } from "./pages/HelpDesk";
import { SessionDetailPage } from "./pages/SessionDetail";
import { SessionsPage } from "./pages/Sessions";
import { SetupPage } from "./pages/Setup";
import { WebhooksPage } from "./pages/Webhooks";
import { useSession } from "./session";

/** Where "/" leads: the setup wizard on an empty instance, else the dashboard or My desktops. */
function Home() {
  const { api, me } = useSession();
  const setup = useQuery({
    queryKey: ["setup"],
    enabled: can(me, "clusters:manage"),
    queryFn: () => unwrap(api.GET("/api/v1/setup")),
  });
  if (!isAdministrator(me)) return <Navigate to="/my" replace />;
  if (can(me, "clusters:manage")) {
    if (!setup.data) return <p aria-busy="true">Loading…</p>;
    if (!setup.data.cluster_connected) return <Navigate to="/setup" replace />;
  }
  return <Navigate to="/dashboard" replace />;
}

function NotFound() {
  const location = useLocation();
  return (
    <section>
      <h1>Not found</h1>
      <p>The console has no page at {location.pathname}.</p>
    </section>
  );
}

export function App() {
  return (
    <LiveUpdates>
      <Routes>
        <Route path="/desktop/:desktopId" element={<DesktopViewPage />} />
        <Route element={<Layout />}>
          <Route index element={<Home />} />
          <Route path="/setup" element={<SetupPage />} />
          <Route path="/dashboard" element={<DashboardPage />} />
          <Route path="/my" element={<MyDesktopsPage />} />
          <Route path="/pools" element={<PoolsPage />} />
          <Route path="/pools/new" element={<NewPoolPage />} />
          <Route path="/pools/:poolId" element={<PoolDetailPage />} />
          <Route path="/pools/:poolId/rollouts" element={<RolloutsPage />} />
          <Route path="/schedules" element={<SchedulesPage />} />
          <Route path="/schedules/new" element={<NewSchedulePage />} />
          <Route path="/schedules/:scheduleId" element={<ScheduleDetailPage />} />
          <Route path="/desktops" element={<DesktopsPage />} />
          <Route path="/sessions" element={<SessionsPage />} />
          <Route path="/sessions/:sessionId" element={<SessionDetailPage />} />
          <Route path="/helpdesk" element={<HelpDeskSearchPage />} />
          <Route path="/helpdesk/:userId" element={<HelpDeskUserPage />} />
          <Route path="/reports" element={<ReportsPage />} />
          <Route path="/clusters" element={<ClustersPage />} />
          <Route path="/clusters/:clusterId" element={<ClusterDetailPage />} />
          <Route path="/people/*" element={<PeoplePage />} />
          <Route path="/recordings" element={<RecordingsPage />} />
          <Route path="/recordings/:recordingId" element={<RecordingPage />} />
          <Route path="/audit" element={<AuditPage />} />
          <Route path="/jobs" element={<JobsPage />} />
          <Route path="/license" element={<LicensePage />} />
          <Route path="/webhooks" element={<WebhooksPage />} />
          <Route path="*" element={<NotFound />} />
        </Route>
      </Routes>
    </LiveUpdates>
  );
}
