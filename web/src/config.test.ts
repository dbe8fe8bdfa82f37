import { describe, expect, it } from "vitest";
import { explicitLogoutUrl, wantsOfflineAccess } from "./auth/oidc";
import { loadConfig, missingSignInSettings, sameIssuer, type ConsoleConfig } from "./config";

const base: ConsoleConfig = {
  apiBaseUrl: "http://127.0.0.1:8080",
  oidcAuthority: "http://127.0.0.1:8090",
  oidcClientId: "deskpool",
  oidcScope: "openid profile email groups offline_access",
  oidcLogoutUrl: "",
};

describe("console configuration", () => {
  it("names the missing sign-in variables", () => {
    expect(missingSignInSettings(base)).toEqual([]);
    expect(missingSignInSettings({ ...base, oidcAuthority: "", oidcClientId: " " })).toEqual([
      "WEB_PUBLIC_OIDC_AUTHORITY",
      "WEB_PUBLIC_OIDC_CLIENT_ID",
    ]);
  });

  it("compares issuers without a trailing slash", () => {
    expect(sameIssuer("http://a/realms/x/", "http://a/realms/x")).toBe(true);
    expect(sameIssuer("http://a/realms/x", "http://b/realms/x")).toBe(false);
  });

  it("reads /config.json with SPEC defaults", async () => {
    const fetcher = async () => new Response(JSON.stringify({ oidcAuthority: "http://i", oidcClientId: "c" }));
    const config = await loadConfig(fetcher as typeof fetch);
    expect(config.apiBaseUrl).toBe("http://localhost:8080");
    expect(config.oidcScope).toBe("openid profile email groups");
  });

  it("renews silently only with offline_access", () => {
    expect(wantsOfflineAccess(base.oidcScope)).toBe(true);
    expect(wantsOfflineAccess("openid profile")).toBe(false);
  });

  it("signs out through WEB_PUBLIC_OIDC_LOGOUT_URL when it is set", () => {
    expect(explicitLogoutUrl(base, null, "http://console")).toBeNull();
    const url = new URL(explicitLogoutUrl({ ...base, oidcLogoutUrl: "http://idp/logout?x=1" }, null, "http://console")!);
    expect(url.searchParams.get("x")).toBe("1");
    expect(url.searchParams.get("post_logout_redirect_uri")).toBe("http://console/");
    expect(url.searchParams.get("client_id")).toBe("deskpool");
  });
});
