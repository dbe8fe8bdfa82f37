/** Sign-in with OIDC authorization code + PKCE through oidc-client-ts (SPEC §5.4). */
import { UserManager, WebStorageStateStore, type User } from "oidc-client-ts";
import type { ConsoleConfig } from "../config";

export const CALLBACK_PATH = "/auth/callback";

/** Whether the scopes ask for a refresh token, which is what silent renewal uses. */
export function wantsOfflineAccess(scope: string): boolean {
  return scope.split(/\s+/).includes("offline_access");
}

export function createUserManager(config: ConsoleConfig, origin = window.location.origin): UserManager {
  return new UserManager({
    authority: config.oidcAuthority,
    client_id: config.oidcClientId,
    redirect_uri: origin + CALLBACK_PATH,
    post_logout_redirect_uri: origin + "/",
    response_type: "code",
    scope: config.oidcScope,
    // Renew with the refresh token (offline_access) before the access token expires; without
    // one there is nothing to renew silently (no hidden iframe: the CSP forbids framing).
    automaticSilentRenew: wantsOfflineAccess(config.oidcScope),
    userStore: new WebStorageStateStore({ store: window.sessionStorage }),
    loadUserInfo: false,
  });
}

/**
 * Where signing out sends the browser: WEB_PUBLIC_OIDC_LOGOUT_URL when it is set (with the
 * usual RP-initiated logout parameters), else null, meaning the provider's end_session_endpoint
 * from discovery (oidc-client-ts' signoutRedirect).
 */
export function explicitLogoutUrl(config: ConsoleConfig, user: User | null, origin: string): string | null {
  if (!config.oidcLogoutUrl) return null;
  const url = new URL(config.oidcLogoutUrl);
  url.searchParams.set("post_logout_redirect_uri", origin + "/");
  url.searchParams.set("client_id", config.oidcClientId);
  if (user?.id_token) url.searchParams.set("id_token_hint", user.id_token);
  return url.toString();
}

export async function signOut(manager: UserManager, config: ConsoleConfig): Promise<void> {
  const user = await manager.getUser();
  const explicit = explicitLogoutUrl(config, user, window.location.origin);
  if (explicit) {
    await manager.removeUser();
    window.location.assign(explicit);
    return;
  }
  await manager.signoutRedirect({ id_token_hint: user?.id_token });
}
