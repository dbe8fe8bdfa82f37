/** What the signed-in user may do, from GET /api/v1/me (the API still enforces every check). */
import type { Schemas } from "../api/client";

export type Me = Schemas["Me"];

export function can(me: Me | undefined, permission: string): boolean {
  if (!me) return false;
  return me.is_platform_admin || me.permissions.includes(permission) || me.permissions.includes("platform:admin");
}

/** Whether the user administers anything at all (else the console is just My desktops). */
export function isAdministrator(me: Me | undefined): boolean {
  if (!me) return false;
  return me.is_platform_admin || me.permissions.length > 0;
}
