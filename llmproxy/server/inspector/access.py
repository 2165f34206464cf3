"""Who may see the inspector: the API's own checks, and one more on a page's Origin.

Every request has had its Host checked already (llmproxy.server.hosts: 421 for the name a DNS-
rebinding page sends). The key is the API's check (llmproxy.server.intake), which here also reads it
from a cookie: a browser adds no header to a page it opens, so ``/inspect?key=KEY`` sets that cookie
once (HttpOnly, SameSite=Strict: no other site's page can make the browser send it) and sends the
browser on to /inspect. A request made by another site's page names that site in Origin: 403, key or
not, as the inspector's data, and its re-run (which generates), are for its own page alone.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import RedirectResponse

from llmproxy.errors import AuthenticationError, OriginNotAllowedError
from llmproxy.server.intake import Intake

COOKIE = "llmproxy_inspector"
PAGE = "/inspect"


def check(request: Request, intake: Intake) -> None:
    """Raise unless ``request`` may see the inspector: from its own page (or no page), with the key."""
    check_origin(request)
    intake.authorize(request, cookie=COOKIE)


def check_origin(request: Request) -> None:
    origin = request.headers.get("origin")
    if origin is not None and not same_origin(origin, request.headers.get("host")):
        raise OriginNotAllowedError(f"The inspector answers its own page only, not one from {origin[:100]!r}.",
                                    param="Origin")


def same_origin(origin: str, host: str | None) -> bool:
    """Whether a page at ``origin`` (``http://127.0.0.1:8100``) is this server's, reached as ``host``."""
    try:
        parts = urlsplit(origin)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and host is not None and parts.netloc.lower() == host.strip().lower()


def login(request: Request, intake: Intake, key: str) -> RedirectResponse:
    """``/inspect?key=KEY``: the key kept in the browser's cookie, and the key out of the address bar."""
    check_origin(request)
    if not intake.accepts(key):
        raise AuthenticationError("Wrong API key for the inspector; open /inspect?key=<the server's key>.")
    page = str(request.scope.get("root_path", "")) + PAGE
    response = RedirectResponse(page, status_code=303)
    if intake.api_key is not None:
        response.set_cookie(COOKIE, key, path=page, httponly=True, samesite="strict")
    return response
