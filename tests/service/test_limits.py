"""service.limits.BodyLimit, the ASGI middleware other servers and chunked bodies meet: a body over the
limit is a 413 whether its Content-Length says so or its chunks add up to it, and the app never runs;
a body within it reaches the app whole."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from service.limits import BodyLimit, too_large


def call(method: str, chunks: list[bytes], length: str | None, limit: int = 10) -> tuple[list[dict], list[bytes]]:
    """Run the middleware on one request; what it sent back, and the bodies the app read."""
    seen: list[bytes] = []

    async def app(scope: dict, receive: Any, send: Any) -> None:
        body = b""
        while True:
            m = await receive()
            body += m.get("body", b"")
            if not m.get("more_body"):
                break
        seen.append(body)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    messages = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)]
    sent: list[dict] = []

    async def receive() -> dict:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(m: dict) -> None:
        sent.append(m)

    headers = [(b"content-length", length.encode())] if length is not None else []
    asyncio.run(BodyLimit(app, limit)({"type": "http", "method": method, "headers": headers}, receive, send))
    return sent, seen


def test_a_declared_length_over_the_limit_is_refused_unread() -> None:
    sent, seen = call("POST", [b"x" * 11], "11")
    assert sent[0]["status"] == 413 and not seen
    assert json.loads(sent[1]["body"])["detail"][0]["type"] == "body_too_large"
    assert dict(sent[0]["headers"])[b"content-length"] == str(len(too_large(10))).encode()


def test_chunks_that_add_up_past_the_limit_are_refused() -> None:
    sent, seen = call("POST", [b"x" * 6, b"y" * 6], None)
    assert sent[0]["status"] == 413 and not seen


@pytest.mark.parametrize("length", [None, "10", "bogus"])
def test_a_body_within_the_limit_reaches_the_app_whole(length: str | None) -> None:
    sent, seen = call("PUT", [b"abcde", b"fghij"], length)
    assert sent[0]["status"] == 200 and seen == [b"abcdefghij"]


def test_methods_without_bodies_pass_untouched() -> None:
    sent, seen = call("GET", [b"x" * 50], "50")
    assert sent[0]["status"] == 200 and seen == [b"x" * 50]


def test_the_refusal_names_the_limit() -> None:
    assert "over 100 bytes" in json.loads(too_large(100))["detail"][0]["msg"]
