/** The console's public configuration, served by deskpool's `web` component at /config.json. */

export interface ConsoleConfig {
  /** WEB_PUBLIC_API_BASE_URL: the API's external origin. */
  apiBaseUrl: string;
  /** WEB_PUBLIC_OIDC_AUTHORITY: must equal the API's AUTH_OIDC_ISSUER_URL. */
  oidcAuthority: string;
  /** WEB_PUBLIC_OIDC_CLIENT_ID. */
  oidcClientId: string;
  /** WEB_PUBLIC_OIDC_SCOPE. */
  oidcScope: string;
  /** WEB_PUBLIC_OIDC_LOGOUT_URL: explicit end-session URL (else the provider's). */
  oidcLogoutUrl: string;
}

/** The variables that must be set for console sign-in, and whether each one is. */
export function missingSignInSettings(config: ConsoleConfig): string[] {
  const missing: string[] = [];
  if (!config.oidcAuthority.trim()) missing.push("WEB_PUBLIC_OIDC_AUTHORITY");
  if (!config.oidcClientId.trim()) missing.push("WEB_PUBLIC_OIDC_CLIENT_ID");
  return missing;
}

/** Two issuer URLs name the same issuer (a trailing slash does not matter). */
export function sameIssuer(a: string, b: string): boolean {
  return a.replace(/\/+$/, "") === b.replace(/\/+$/, "");
}

function text(value: unknown, fallback = ""): string {
  return typeof value === "string" ? value : fallback;
}

/** Read /config.json; the API base defaults to the SPEC default. */
export async function loadConfig(fetcher: typeof fetch = fetch): Promise<ConsoleConfig> {
  const response = await fetcher("/config.json", { headers: { Accept: "application/json" } });
  if (!response.ok) throw new Error(`/config.json answered ${response.status}`);
  const raw = (await response.json()) as Record<string, unknown>;
  return {
    apiBaseUrl: text(raw.apiBaseUrl, "http://localhost:8080").replace(/\/+$/, ""),
    oidcAuthority: text(raw.oidcAuthority),
    oidcClientId: text(raw.oidcClientId),
    oidcScope: text(raw.oidcScope, "openid profile email groups"),
    oidcLogoutUrl: text(raw.oidcLogoutUrl),
  };
}
