/** The signed-in session: configuration, OIDC user manager, API client and the caller (/me). */
import { createContext, useContext } from "react";
import type { UserManager } from "oidc-client-ts";
import type { Api } from "./api/client";
import type { Me } from "./auth/permissions";
import type { ConsoleConfig } from "./config";

export interface Session {
  config: ConsoleConfig;
  users: UserManager;
  api: Api;
  me: Me;
  getToken: () => Promise<string | null>;
  signOut: () => Promise<void>;
}

export const SessionContext = createContext<Session | null>(null);

export function useSession(): Session {
  const session = useContext(SessionContext);
  if (!session) throw new Error("useSession outside a signed-in session");
  return session;
}
