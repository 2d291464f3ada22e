"""Reject request bodies over a size limit before anything parses them (HTTP 413)."""

from __future__ import annotations

from typing import Any

import orjson

Scope = dict[str, Any]


def too_large(max_bytes: int) -> bytes:
    """The 413's JSON body (the service's error shape); ``service.http`` writes the same one."""
    return orjson.dumps(
        {"detail": [{"loc": ["body"], "msg": f"request body is over {max_bytes} bytes", "type": "body_too_large"}]}
    )


class BodyLimit:
    """Pure ASGI middleware: checks Content-Length, and counts streamed bytes when it is absent. Under
    ``service.http``'s protocol a Content-Length over the limit is refused before a task is made; this
    check is what other servers (tests' ASGI transport, a plain uvicorn) and chunked bodies meet."""

    def __init__(self, app: Any, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    def _too_large(self) -> bytes:
        return too_large(self.max_bytes)

    async def _reject(self, send: Any) -> None:
        body = self._too_large()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    too_big = int(value) > self.max_bytes
                except ValueError:
                    too_big = False
                if too_big:
                    await self._reject(send)
                    return
        # Without a usable Content-Length (chunked), read the body here up to the limit, then replay it.
        chunks: list[bytes] = []
        seen = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunks.append(message.get("body", b""))
            seen += len(chunks[-1])
            if seen > self.max_bytes:
                await self._reject(send)
                return
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay() -> dict:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)
