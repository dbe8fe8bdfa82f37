"""The sign-in page of the test identity provider, and its browser sessions.

With ``sign_in_page=True`` (what ``deskpool dev`` runs), ``GET /authorize`` without a browser
session shows a page listing the provider's users; choosing one (``POST /authorize``) opens a
browser session (an HttpOnly cookie) and continues the authorization code flow. Later
authorizations in the same browser sign in that user at once (single sign-on) unless the client
asks ``prompt=login``; ``/logout`` (the ``end_session_endpoint``) ends the session, so the next
sign-in shows the page again. Without the page, the hinted or default user is signed in at once,
which is what unattended tests want.
"""

from __future__ import annotations

import html
import secrets
from collections.abc import Mapping
from typing import TYPE_CHECKING
from urllib.parse import urlencode

from aiohttp import web

if TYPE_CHECKING:
    from deskpool.testing.idp import TestIdentityProvider

#: The cookie holding the browser session's id.
SESSION_COOKIE = "deskpool_idp_session"

_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Sign in: deskpool development issuer</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body {{ font-family: system-ui, sans-serif; max-width: 32rem; margin: 3rem auto; padding: 0 1rem;
  color: #1f2937; }}
button {{ display: block; width: 100%; margin: 0.5rem 0; padding: 0.75rem; font-size: 1rem;
  text-align: left; border: 1px solid #9ca3af; border-radius: 0.4rem; background: #f9fafb;
  cursor: pointer; }}
button:focus, button:hover {{ border-color: #1d4ed8; outline: 2px solid #1d4ed8; }}
small {{ color: #4b5563; }}
</style></head>
<body><main>
<h1>Sign in</h1>
<p>The development issuer of deskpool signs in any of its users without a password.
Choose who you are for <strong>{client}</strong>.</p>
<form method="post" action="{action}">
{hidden}
{buttons}
</form>
</main></body></html>
"""


def signed_in_subject(idp: TestIdentityProvider, request: web.Request) -> str | None:
    """The subject of the browser's session, unless there is none or ``prompt=login``."""
    if request.query.get("prompt") == "login":
        return None
    session = request.cookies.get(SESSION_COOKIE, "")
    subject = idp.browser_sessions.get(session)
    return subject if subject in idp.users else None


def sign_in_page(idp: TestIdentityProvider, query: Mapping[str, str], action: str) -> web.Response:
    """The page that lists the users; its form posts the authorization request back."""
    hidden = "\n".join(
        f'<input type="hidden" name="{html.escape(name)}" value="{html.escape(value)}">'
        for name, value in query.items()
        if name != "prompt"
    )
    buttons = "\n".join(
        '<button type="submit" name="user" value="{subject}">{name}<br><small>{email}</small>'
        "</button>".format(
            subject=html.escape(user.subject),
            name=html.escape(str(user.claims.get("name") or user.subject)),
            email=html.escape(str(user.claims.get("email") or user.subject)),
        )
        for user in idp.users.values()
    )
    page = _PAGE.format(
        client=html.escape(query.get("client_id", "")),
        action=html.escape(action),
        hidden=hidden,
        buttons=buttons,
    )
    return web.Response(
        text=page,
        content_type="text/html",
        headers={
            "Cache-Control": "no-store",
            # No form-action: browsers apply it to the redirects that follow the form too,
            # and the flow ends at the client's redirect URI on another origin.
            "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; "
            "frame-ancestors 'none'",
        },
    )


async def submit_sign_in(request: web.Request, idp: TestIdentityProvider) -> web.Response:
    """``POST /authorize``: open a browser session for the chosen user, continue the flow."""
    form = await request.post()
    subject = str(form.get("user", ""))
    if subject not in idp.users:
        return web.Response(status=400, text="Choose one of the listed users.")
    query = {
        name: str(value) for name, value in form.items() if name != "user" and name != "prompt"
    }
    session = secrets.token_urlsafe(24)
    idp.browser_sessions[session] = subject
    response = web.Response(status=303, headers={"Location": request.path + "?" + urlencode(query)})
    response.set_cookie(
        SESSION_COOKIE, session, httponly=True, samesite="Lax", path=idp.issuer_path or "/"
    )
    return response


def end_browser_session(idp: TestIdentityProvider, request: web.Request) -> dict[str, str]:
    """Forget the browser's session; the headers that delete its cookie."""
    session = request.cookies.get(SESSION_COOKIE)
    if session:
        idp.browser_sessions.pop(session, None)
    path = idp.issuer_path or "/"
    return {"Set-Cookie": f"{SESSION_COOKIE}=; Max-Age=0; Path={path}; HttpOnly; SameSite=Lax"}
