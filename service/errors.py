"""Every error the service answers, in one place: request validation, the domain errors of
``tiling_model`` (the BcetuneError tree) and anything unexpected, as JSON serialised by orjson.

What a client sent is echoed back only made safe: non-finite numbers and integers beyond 64 bits
become strings, lone surrogates are escaped, long strings and containers are cut, so an error answer
can always be encoded (a refused request never becomes a 500). Unexpected errors are logged as one
JSON line each, with at most one traceback per kind and minute.
"""

from __future__ import annotations

import logging
import math
import time
import traceback
from typing import Any

import orjson
from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response

from service.logs import LOGGER, event
from tiling_model import BadRequest, BcetuneError, InvalidTiling

log = logging.getLogger(LOGGER)
MAX_ECHO_CHARS = 120
MAX_ECHO_ITEMS = 16
MAX_ECHO_DEPTH = 4
MAX_MSG_CHARS = 2000  # our own messages may quote what was sent (an unknown SoC name...)
MAX_ERRORS = 16  # items per 422: a 64 KiB body can break thousands of rules; the first ones say enough
TRACEBACK_EVERY_S = 60.0

#: violation kind -> the knobs that can cause it, most likely first (the 422 points at one the request fixed)
VIOLATION_KNOBS: dict[str, tuple[str, ...]] = {
    "core_count": ("core_num",),
    "queue_limit": ("buffer_num",),
    "ub_overflow": ("tile_bytes", "buffer_num"),
    "misaligned_copy": ("tile_bytes", "block_bytes"),
    "coverage": ("tile_bytes", "block_bytes", "core_num"),
    "out_of_bounds": ("block_bytes", "tile_bytes", "core_num"),
    "scalar_out_of_bounds": ("block_bytes", "tile_bytes"),
}


def safe(value: Any, depth: int = 0, max_chars: int = MAX_ECHO_CHARS) -> Any:
    """``value`` (parsed from a client's JSON) made encodable and short."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, int):
        return value if -(2**63) <= value < 2**64 else f"<integer of {len(str(abs(value)))} digits>"
    if isinstance(value, str):
        text = value.encode("utf-8", "backslashreplace").decode("utf-8")  # lone surrogates -> \ud800
        return text if len(text) <= max_chars else text[:max_chars] + f"... ({len(text)} chars)"
    if depth >= MAX_ECHO_DEPTH:
        return "..."
    if isinstance(value, dict):
        items = list(value.items())
        out = {str(safe(k, depth + 1)): safe(v, depth + 1) for k, v in items[:MAX_ECHO_ITEMS]}
        if len(items) > MAX_ECHO_ITEMS:
            out["..."] = f"{len(items) - MAX_ECHO_ITEMS} more keys"
        return out
    if isinstance(value, list | tuple):
        out_list = [safe(v, depth + 1) for v in value[:MAX_ECHO_ITEMS]]
        if len(value) > MAX_ECHO_ITEMS:
            out_list.append(f"... {len(value) - MAX_ECHO_ITEMS} more items")
        return out_list
    return safe(str(value), depth)


def error_response(
    items: list[dict[str, Any]], status_code: int = 422, headers: dict[str, str] | None = None
) -> Response:
    return Response(
        orjson.dumps({"detail": items[:MAX_ERRORS]}),
        status_code=status_code,
        media_type="application/json",
        headers=headers,
    )


def domain_item(e: BcetuneError, loc: list[str | int], given: tuple[str, ...] = ()) -> dict[str, Any]:
    """One 422 item for a domain error; ``loc`` is where the request's knobs/fields live, extended by
    the field the error names (or, for a broken tiling, the first knob the request fixed that can cause it)."""
    field = getattr(e, "field", None)
    if isinstance(e, InvalidTiling) and field is None:
        for v in e.violations:
            field = next((k for k in VIOLATION_KNOBS.get(str(v.get("kind")), ()) if k in given), None)
            if field:
                break
    item: dict[str, Any] = {
        "loc": [*loc, field] if field else loc,
        "msg": safe(str(e), max_chars=MAX_MSG_CHARS),
        "type": e.kind,
    }
    if isinstance(e, InvalidTiling):
        item["violations"] = e.violations
    return item


async def validation_error(_request: Request, e: Exception) -> Response:
    """Pydantic's 422, with only loc / msg / type / a safe echo of the input (no ctx objects, no URL)."""
    assert isinstance(e, RequestValidationError)
    items = []
    for err in e.errors()[:MAX_ERRORS]:
        msg = str(err.get("msg", "")).removeprefix("Value error, ")
        if err.get("type") == "json_invalid" and isinstance(err.get("ctx"), dict) and "error" in err["ctx"]:
            msg = f"{msg}: {err['ctx']['error']}"  # the parser's reason: "unexpected character", "lone surrogate"...
        item = {
            "loc": [safe(x) for x in err.get("loc", ())],
            "msg": safe(msg, max_chars=MAX_MSG_CHARS),
            "type": err.get("type"),
        }
        if "input" in err and err.get("type") != "json_invalid":
            item["input"] = safe(err["input"])
        items.append(item)
    return error_response(items)


async def bcetune_error(_request: Request, e: Exception) -> Response:
    """A domain error no route mapped to a field: bad input is a 422 on the body, anything else a 500."""
    assert isinstance(e, BcetuneError)
    if isinstance(e, BadRequest | InvalidTiling):
        return error_response([domain_item(e, ["body"])])
    return await unexpected(e)


class _TracebackBudget:
    """At most one traceback per exception type and TRACEBACK_EVERY_S; the rest are counted."""

    def __init__(self) -> None:
        self.last: dict[str, float] = {}
        self.suppressed: dict[str, int] = {}

    def take(self, kind: str) -> tuple[bool, int]:
        now = time.monotonic()
        if now - self.last.get(kind, -math.inf) >= TRACEBACK_EVERY_S:
            self.last[kind] = now
            return True, self.suppressed.pop(kind, 0)
        self.suppressed[kind] = self.suppressed.get(kind, 0) + 1
        return False, 0


TRACEBACKS = _TracebackBudget()


async def unexpected(e: BaseException) -> Response:
    """A bug, not the client's fault: one JSON log line, a 500 that says nothing internal, and the
    connection closed (the client's next request starts clean)."""
    kind = type(e).__name__
    with_trace, suppressed = TRACEBACKS.take(kind)
    fields: dict[str, Any] = {"error": kind, "detail": safe(str(e), max_chars=MAX_MSG_CHARS)}
    if with_trace:
        fields["traceback"] = "".join(traceback.format_exception(e))[-8000:]
        fields["tracebacks_suppressed_since_last"] = suppressed
    event(log, logging.ERROR, "unexpected error answering a request", **fields)
    item = {"loc": [], "msg": "internal error; it is logged", "type": "internal"}
    return error_response([item], status_code=500, headers={"connection": "close"})


class CatchAll:
    """Pure ASGI middleware inside Starlette's ServerErrorMiddleware: any exception escaping the app
    becomes ``unexpected``'s answer (or, after the response started, a logged, closed connection)
    instead of a plain-text traceback on stderr."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: dict[str, Any]) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception as e:  # noqa: BLE001 - the one place every escaped error is turned into an answer
            response = await unexpected(e)
            if not started:
                await response(scope, receive, send)
