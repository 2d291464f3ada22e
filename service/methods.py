"""Two HTTP details Starlette leaves to the app: HEAD is answered wherever GET is (RFC 9110: a server
that answers GET answers HEAD), and a path with a trailing slash is redirected to its route with a
relative ``Location``: Starlette's own redirect builds an absolute URL from the client's Host header,
which a client can set to anything."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from starlette.routing import BaseRoute, Match

Scope = dict[str, Any]


class HeadAndSlashes:
    """Pure ASGI middleware over the app's routes (the app is built with ``redirect_slashes=False``)."""

    def __init__(self, app: Any, routes: list[BaseRoute]) -> None:
        self.app = app
        self.routes = routes

    def _routed(self, scope: Scope) -> bool:
        """Some route takes this path (with this method or another: a 405 is the route's to give)."""
        return any(route.matches(scope)[0] != Match.NONE for route in self.routes)

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["method"] == "HEAD":
            # the app answers a GET; uvicorn, whose scope still says HEAD, sends its headers only
            scope = {**scope, "method": "GET"}
        path: str = scope["path"]
        if path != "/" and path.endswith("/") and not self._routed(scope):
            stripped = path.rstrip("/")
            if stripped and self._routed({**scope, "path": stripped}):
                await _redirect(send, stripped, scope.get("query_string", b""))
                return
        await self.app(scope, receive, send)


async def _redirect(send: Any, path: str, query: bytes) -> None:
    location = quote(path, safe="/") + ("?" + query.decode("latin-1") if query else "")
    headers = [(b"location", location.encode("latin-1")), (b"content-length", b"0")]
    await send({"type": "http.response.start", "status": 307, "headers": headers})
    await send({"type": "http.response.body", "body": b""})
