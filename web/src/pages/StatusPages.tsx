/** Pages shown instead of the console when sign-in cannot work, each saying what to change. */
import type { ReactNode } from "react";

function Frame({ title, children }: { title: string; children: ReactNode }) {
  return (
    <main className="container narrow">
      <article>
        <header>
          <h1>{title}</h1>
        </header>
        {children}
      </article>
    </main>
  );
}

export function NotConfiguredPage({ missing }: { missing: string[] }) {
  return (
    <Frame title="Console sign-in is not configured">
      <p>The web console cannot sign you in because these settings of its web process are empty:</p>
      <ul>
        {missing.map((name) => (
          <li key={name}>
            <code>{name}</code>
          </li>
        ))}
      </ul>
      <p>
        Set <code>WEB_PUBLIC_OIDC_AUTHORITY</code> to the API's issuer (<code>AUTH_OIDC_ISSUER_URL</code>) and{" "}
        <code>WEB_PUBLIC_OIDC_CLIENT_ID</code> to the console's OIDC client id, then restart the web process.
      </p>
    </Frame>
  );
}

export function ApiNotConfiguredPage({ detail }: { detail: string }) {
  return (
    <Frame title="The API has no sign-in configured">
      <p>The API answered 503: its OIDC settings are missing, so it accepts no token.</p>
      <blockquote>{detail}</blockquote>
      <p>
        Set <code>AUTH_OIDC_ISSUER_URL</code> and <code>AUTH_OIDC_AUDIENCE</code> on the api process and restart
        it.
      </p>
      <button type="button" onClick={() => window.location.reload()}>
        Try again
      </button>
    </Frame>
  );
}

export function IssuerMismatchPage({ consoleIssuer, apiIssuer }: { consoleIssuer: string; apiIssuer: string }) {
  return (
    <Frame title="The console and the API trust different issuers">
      <p>You signed in, but the API does not accept tokens from the console's issuer.</p>
      <dl>
        <dt>Console (WEB_PUBLIC_OIDC_AUTHORITY)</dt>
        <dd>
          <code>{consoleIssuer}</code>
        </dd>
        <dt>API (AUTH_OIDC_ISSUER_URL)</dt>
        <dd>
          <code>{apiIssuer}</code>
        </dd>
      </dl>
      <p>
        <code>WEB_PUBLIC_OIDC_AUTHORITY</code> must equal the API's <code>AUTH_OIDC_ISSUER_URL</code>.
      </p>
    </Frame>
  );
}

export function SignInPage({ onSignIn, notice }: { onSignIn: () => void; notice?: string }) {
  return (
    <Frame title="deskpool">
      <p>Sign in to manage desktop pools or to open your desktop.</p>
      {notice ? (
        <p role="alert" className="notice">
          {notice}
        </p>
      ) : null}
      <button type="button" onClick={onSignIn}>
        Sign in
      </button>
    </Frame>
  );
}

export function FailurePage({ title, detail }: { title: string; detail: string }) {
  return (
    <Frame title={title}>
      <p role="alert">{detail}</p>
      <button type="button" onClick={() => window.location.reload()}>
        Try again
      </button>
    </Frame>
  );
}

export function LoadingPage() {
  return (
    <main className="container narrow" aria-busy="true">
      <p>Loading…</p>
    </main>
  );
}
