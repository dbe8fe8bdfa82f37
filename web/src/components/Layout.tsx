/** The console's frame: a navigation with only what the signed-in user may open. */
import { NavLink, Outlet } from "react-router";
import { can, isAdministrator } from "../auth/permissions";
import { useSession } from "../session";
import { LiveStatus } from "../live/LiveStatus";

interface Item {
  to: string;
  label: string;
  permission?: string;
  anyOf?: string[];
}

const ITEMS: Item[] = [
  { to: "/dashboard", label: "Dashboard", anyOf: ["pools:read", "desktops:read", "jobs:read"] },
  { to: "/my", label: "My desktops" },
  { to: "/pools", label: "Pools", permission: "pools:read" },
  { to: "/schedules", label: "Schedules", permission: "schedules:read" },
  { to: "/desktops", label: "Desktops", permission: "desktops:read" },
  { to: "/sessions", label: "Sessions", permission: "sessions:read" },
  { to: "/helpdesk", label: "Help desk", permission: "sessions:read" },
  { to: "/clusters", label: "Clusters", permission: "clusters:read" },
  { to: "/people", label: "People", anyOf: ["users:read", "groups:read", "roles:read"] },
  { to: "/reports", label: "Reports", permission: "reports:read" },
  { to: "/recordings", label: "Recordings", permission: "recordings:read" },
  { to: "/audit", label: "Audit", permission: "audit:read" },
  { to: "/jobs", label: "Jobs", permission: "jobs:read" },
  { to: "/license", label: "License", permission: "license:read" },
];

export function visibleItems(me: Parameters<typeof can>[0]): Item[] {
  if (!isAdministrator(me)) return ITEMS.filter((item) => item.to === "/my");
  return ITEMS.filter(
    (item) =>
      (!item.permission || can(me, item.permission)) && (!item.anyOf || item.anyOf.some((p) => can(me, p))),
  );
}

export function Layout() {
  const session = useSession();
  const { me } = session;
  return (
    <>
      <a className="skip-link" href="#main">
        Skip to content
      </a>
      <header className="container-fluid topbar">
        <nav aria-label="Main">
          <ul>
            <li>
              <strong>deskpool</strong>
            </li>
          </ul>
          <ul className="nav-items">
            {visibleItems(me).map((item) => (
              <li key={item.to}>
                <NavLink to={item.to}>{item.label}</NavLink>
              </li>
            ))}
          </ul>
          <ul>
            <li>
              <LiveStatus />
            </li>
            <li>
              <span className="who">{me.display_name || me.email || me.subject}</span>
            </li>
            <li>
              <button type="button" className="secondary outline" onClick={() => void session.signOut()}>
                Sign out
              </button>
            </li>
          </ul>
        </nav>
      </header>
      <main id="main" className="container-fluid">
        <Outlet />
      </main>
    </>
  );
}
