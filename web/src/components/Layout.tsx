/**
 * The console's frame: a navigation with only what the signed-in user may open, grouped
 * (desktops, people, monitoring, settings). On a wide screen the groups sit on one row under the
 * top bar; below 1024 px they fold behind a Menu button and open as a column, so every page is
 * reachable from a phone (390 px) to a wide screen.
 */
import { useEffect, useState } from "react";
import { NavLink, Outlet, useLocation } from "react-router";
import { can, isAdministrator } from "../auth/permissions";
import { useSession } from "../session";
import { LiveStatus } from "../live/LiveStatus";

type Group = "Desktops" | "People" | "Monitoring" | "Settings";

interface Item {
  to: string;
  label: string;
  group: Group;
  permission?: string;
  anyOf?: string[];
}

export const GROUPS: Group[] = ["Desktops", "People", "Monitoring", "Settings"];

const ITEMS: Item[] = [
  { to: "/dashboard", label: "Dashboard", group: "Desktops", anyOf: ["pools:read", "desktops:read", "jobs:read"] },
  { to: "/my", label: "My desktops", group: "Desktops" },
  { to: "/pools", label: "Pools", group: "Desktops", permission: "pools:read" },
  { to: "/desktops", label: "Desktops", group: "Desktops", permission: "desktops:read" },
  { to: "/sessions", label: "Sessions", group: "Desktops", permission: "sessions:read" },
  { to: "/schedules", label: "Schedules", group: "Desktops", permission: "schedules:read" },
  { to: "/people", label: "People", group: "People", anyOf: ["users:read", "groups:read", "roles:read"] },
  { to: "/helpdesk", label: "Help desk", group: "People", permission: "sessions:read" },
  { to: "/reports", label: "Reports", group: "Monitoring", permission: "reports:read" },
  { to: "/recordings", label: "Recordings", group: "Monitoring", permission: "recordings:read" },
  { to: "/audit", label: "Audit", group: "Monitoring", permission: "audit:read" },
  { to: "/jobs", label: "Jobs", group: "Monitoring", permission: "jobs:read" },
  { to: "/clusters", label: "Clusters", group: "Settings", permission: "clusters:read" },
  { to: "/webhooks", label: "Webhooks", group: "Settings", permission: "webhooks:read" },
  { to: "/license", label: "License", group: "Settings", permission: "license:read" },
];

export function visibleItems(me: Parameters<typeof can>[0]): Item[] {
  if (!isAdministrator(me)) return ITEMS.filter((item) => item.to === "/my");
  return ITEMS.filter(
    (item) =>
      (!item.permission || can(me, item.permission)) && (!item.anyOf || item.anyOf.some((p) => can(me, p))),
  );
}

/** The visible items by group, in the groups' order, leaving out empty groups. */
export function groupedItems(me: Parameters<typeof can>[0]): Array<[Group, Item[]]> {
  const items = visibleItems(me);
  return GROUPS.map((group): [Group, Item[]] => [group, items.filter((item) => item.group === group)]).filter(
    ([, members]) => members.length > 0,
  );
}

function Navigation({ me }: { me: Parameters<typeof can>[0] }) {
  const groups = groupedItems(me);
  const single = groups.length === 1;
  return (
    <ul className="nav-groups">
      {groups.map(([group, items]) => (
        <li key={group} className="nav-group">
          {single ? null : (
            <span className="nav-group-label" id={`nav-${group}`}>
              {group}
            </span>
          )}
          <ul aria-labelledby={single ? undefined : `nav-${group}`}>
            {items.map((item) => (
              <li key={item.to}>
                <NavLink to={item.to}>{item.label}</NavLink>
              </li>
            ))}
          </ul>
        </li>
      ))}
    </ul>
  );
}

export function Layout() {
  const session = useSession();
  const { me } = session;
  const location = useLocation();
  const [menuOpen, setMenuOpen] = useState(false);
  // Following a link closes the folded menu.
  useEffect(() => setMenuOpen(false), [location.pathname]);
  return (
    <>
      <a className="skip-link" href="#main">
        Skip to content
      </a>
      <header className={groupedItems(me).length > 1 ? "container-fluid topbar" : "container-fluid topbar single"}>
        <div className="topbar-row">
          <strong className="brand">deskpool</strong>
          <button
            type="button"
            className="secondary outline menu-toggle"
            aria-expanded={menuOpen}
            aria-controls="main-nav"
            onClick={() => setMenuOpen((open) => !open)}
          >
            Menu
          </button>
          <div className="topbar-end">
            <LiveStatus />
            <span className="who">{me.display_name || me.email || me.subject}</span>
            <button type="button" className="secondary outline" onClick={() => void session.signOut()}>
              Sign out
            </button>
          </div>
        </div>
        <nav
          aria-label="Main"
          id="main-nav"
          className={menuOpen ? "main-nav open" : "main-nav"}
          onClick={(event) => {
            if ((event.target as Element).closest("a")) setMenuOpen(false);
          }}
        >
          <Navigation me={me} />
        </nav>
      </header>
      <main id="main" className="container-fluid">
        <Outlet />
      </main>
    </>
  );
}
