/** From /config.json to a signed-in session, or to the page that says why there is none. */
import { useCallback, useEffect, useState } from "react";
import type { QueryClient } from "@tanstack/react-query";
import type { UserManager } from "oidc-client-ts";
import { createApi, unwrap } from "./api/client";
import { ApiError, describeError } from "./api/problem";
import { prefetchRoute } from "./api/queries";
import { CALLBACK_PATH, createUserManager, signOut } from "./auth/oidc";
import { loadConfig, missingSignInSettings, sameIssuer, type ConsoleConfig } from "./config";
import type { Session } from "./session";
import {
  ApiNotConfiguredPage,
  FailurePage,
  IssuerMismatchPage,
  LoadingPage,
  NotConfiguredPage,
  SignInPage,
} from "./pages/StatusPages";

export type Phase =
  | { kind: "loading" }
  | { kind: "failure"; title: string; detail: string }
  | { kind: "not-configured"; missing: string[] }
  | { kind: "signed-out"; users: UserManager; notice?: string }
  | { kind: "api-not-configured"; detail: string }
  | { kind: "issuer-mismatch"; consoleIssuer: string; apiIssuer: string }
  | { kind: "ready"; session: Session };

/** The issuer the API trusts, read through its discovery redirect (/docs/openid-configuration). */
export async function apiIssuer(config: ConsoleConfig): Promise<string | null> {
  try {
    const response = await fetch(`${config.apiBaseUrl}/docs/openid-configuration`);
    if (!response.ok) return null;
    const body = (await response.json()) as { issuer?: unknown };
    return typeof body.issuer === "string" ? body.issuer : null;
  } catch {
    return null;
  }
}

/** Why a return from the issuer did not sign in, in words. */
export function callbackNotice(error: unknown): string {
  const text = describeError(error);
  if (/no matching state/i.test(text)) {
    return "That sign-in page was already used (the browser went back to it). Sign in again.";
  }
  return `Sign-in did not complete: ${text}`;
}

async function start(setPhase: (phase: Phase) => void, queries?: QueryClient): Promise<void> {
  let config: ConsoleConfig;
  try {
    config = await loadConfig();
  } catch (error) {
    setPhase({ kind: "failure", title: "The console could not start", detail: describeError(error) });
    return;
  }
  const missing = missingSignInSettings(config);
  if (missing.length) {
    setPhase({ kind: "not-configured", missing });
    return;
  }
  const users = createUserManager(config);
  if (window.location.pathname === CALLBACK_PATH) {
    try {
      const signedIn = await users.signinRedirectCallback();
      const back = typeof signedIn.state === "string" && signedIn.state.startsWith("/") ? signedIn.state : "/";
      window.history.replaceState(null, "", back);
    } catch (error) {
      window.history.replaceState(null, "", "/");
      // Back into a sign-in already completed (its one-time state is used up): carry on signed
      // in when the tab is, else ask to sign in again in words, not the library's.
      const current = await users.getUser().catch(() => null);
      if (!current || current.expired) {
        setPhase({ kind: "signed-out", users, notice: callbackNotice(error) });
        return;
      }
    }
  }
  let user = await users.getUser();
  if (user && user.expired && user.refresh_token) {
    user = await users.signinSilent().catch(() => null);
  }
  if (!user || user.expired) {
    setPhase({ kind: "signed-out", users });
    return;
  }
  const getToken = async () => (await users.getUser())?.access_token ?? null;
  const api = createApi(config.apiBaseUrl, getToken);
  // The page's data in parallel with /me (a caller who may not read it gets the API's 403 there).
  if (queries) prefetchRoute(window.location.pathname, api, queries);
  try {
    const me = await unwrap(api.GET("/api/v1/me"));
    setPhase({
      kind: "ready",
      session: { config, users, api, me, getToken, signOut: () => signOut(users, config) },
    });
  } catch (error) {
    if (error instanceof ApiError && error.status === 503) {
      setPhase({ kind: "api-not-configured", detail: describeError(error) });
    } else if (error instanceof ApiError && error.status === 401) {
      const trusted = await apiIssuer(config);
      if (trusted && !sameIssuer(trusted, config.oidcAuthority)) {
        setPhase({ kind: "issuer-mismatch", consoleIssuer: config.oidcAuthority, apiIssuer: trusted });
      } else {
        await users.removeUser();
        setPhase({ kind: "signed-out", users, notice: `The API refused the sign-in: ${describeError(error)}` });
      }
    } else if (error instanceof ApiError) {
      setPhase({ kind: "failure", title: "The API refused the console", detail: describeError(error) });
    } else {
      setPhase({
        kind: "failure",
        title: "The API cannot be reached",
        detail: `${config.apiBaseUrl} did not answer (${describeError(error)}). Check WEB_PUBLIC_API_BASE_URL and that the API lists this console's origin in API_CORS_ALLOWED_ORIGINS.`,
      });
    }
  }
}

export function Boot({
  children,
  queries,
}: {
  children: (session: Session) => React.ReactNode;
  queries?: QueryClient;
}) {
  const [phase, setPhase] = useState<Phase>({ kind: "loading" });
  useEffect(() => {
    void start(setPhase, queries);
  }, [queries]);
  const signIn = useCallback((users: UserManager) => {
    const here = window.location.pathname + window.location.search;
    void users.signinRedirect({ state: here === CALLBACK_PATH ? "/" : here });
  }, []);
  useEffect(() => {
    if (phase.kind !== "ready") return;
    const { users } = phase.session;
    const expired = () => setPhase({ kind: "signed-out", users, notice: "Your sign-in has ended." });
    users.events.addAccessTokenExpired(expired);
    users.events.addUserSignedOut(expired);
    return () => {
      users.events.removeAccessTokenExpired(expired);
      users.events.removeUserSignedOut(expired);
    };
  }, [phase]);
  switch (phase.kind) {
    case "loading":
      return <LoadingPage />;
    case "failure":
      return <FailurePage title={phase.title} detail={phase.detail} />;
    case "not-configured":
      return <NotConfiguredPage missing={phase.missing} />;
    case "signed-out":
      return <SignInPage notice={phase.notice} onSignIn={() => signIn(phase.users)} />;
    case "api-not-configured":
      return <ApiNotConfiguredPage detail={phase.detail} />;
    case "issuer-mismatch":
      return <IssuerMismatchPage consoleIssuer={phase.consoleIssuer} apiIssuer={phase.apiIssuer} />;
    case "ready":
      return <>{children(phase.session)}</>;
  }
}
