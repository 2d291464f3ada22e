"""The tiling explorer: ``GET /explorer`` (a static page, no front-end build, nothing fetched from
outside), ``POST /tiling/explain`` (the answer of ``POST /tiling`` with the pictures' data) and
``POST /tiling/plot/{picture}`` (one of the four pictures, SVG or PNG).

The same request body and limits as ``POST /tiling``; a tiling the service refuses is refused here
with the same 422. The answer comes from the cached answers on the event loop, as ``POST /tiling``'s does;
the tiling behind it, the explanation and the pictures (scoring a slice and drawing take tens of
milliseconds to seconds) are computed in the scheduler's worker processes (``service.scheduler``: a
share per client, 429 or 503 past it), which keep the explanations they made for the pictures; the
serving process caches only bytes (JSON, SVG, PNG), and what these routes do on its event loop is
charged to the expensive requests' share of it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from importlib import resources
from typing import Any, Literal

import orjson
from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from model_tools.explain import Explanation, explain
from service.bodies import OrjsonRoute
from service.deps import ServiceDep
from service.routes.tiling import answer, refused
from service.scheduler import LoopClock, client_of
from service.schemas import ERRORS, TilingRequest
from tiling_model import BadRequest, InvalidTiling, SocProfile, TilingParams, Variant, compute_tiling

router = APIRouter(tags=["explorer"], route_class=OrjsonRoute)  # bodies parsed by orjson
Picture = Literal["core_map", "ub", "timeline", "landscape"]
CACHE_SIZE = 256


class _Lru:
    """A small thread-safe LRU of computed results (the routes run in worker threads)."""

    def __init__(self, size: int) -> None:
        self.size, self.items, self.lock = size, OrderedDict[Any, Any](), threading.Lock()

    def get(self, key: Any) -> Any:
        with self.lock:
            if key in self.items:
                self.items.move_to_end(key)
                return self.items[key]
        return None

    def put(self, key: Any, value: Any) -> None:
        with self.lock:
            self.items[key] = value
            self.items.move_to_end(key)
            while len(self.items) > self.size:
                self.items.popitem(last=False)


_explained = _Lru(CACHE_SIZE)
_pictures = _Lru(CACHE_SIZE)


# --- in a worker process -------------------------------------------------------------------------------

#: What a worker process keeps of the explanations it made: a picture of one is drawn without making it
#: again (the serving process holds only bytes; a picture on another worker makes it there).
_made = _Lru(CACHE_SIZE)


def _explanation(key: Any, shape: list[int], variant: Variant, params: dict[str, Any], profile: SocProfile,
                 period: int | None) -> Explanation:  # fmt: skip
    e = _made.get(key)
    if e is None:
        e = explain(compute_tiling(shape, variant, TilingParams(**params), profile, "exact", period), profile)
        _made.put(key, e)
    return e


def explained(key: Any, shape: list[int], variant: Variant, params: dict[str, Any], profile: SocProfile,
              period: int | None) -> bytes:  # fmt: skip
    """A worker process's job: the tiling behind an answer, its explanation, and the explanation's JSON."""
    e = _explanation(key, shape, variant, params, profile, period)
    return orjson.dumps(e.as_dict(), option=orjson.OPT_SERIALIZE_NUMPY)


def draw(key: Any, shape: list[int], variant: Variant, params: dict[str, Any], profile: SocProfile,
         period: int | None, picture: str, fmt: str) -> bytes:  # fmt: skip
    """A worker process's job: one picture of an answer's explanation (matplotlib is imported here, in the
    worker processes only)."""
    from model_tools.explorer_plot import render

    return render(_explanation(key, shape, variant, params, profile, period), picture, fmt)


# --- on the event loop ---------------------------------------------------------------------------------


async def _explain(req: TilingRequest, service: ServiceDep, request: Request, clock: LoopClock,
                   picture: tuple[str, str] | None = None) -> tuple[bytes, bytes]:  # fmt: skip
    """The answer's JSON, and its explanation's JSON or (``picture``: name, format) that picture."""
    body = answer(req, service.store, service.metrics, service.settings)
    doc: dict[str, Any] = orjson.loads(body)
    key = (req.model_dump_json(), doc["tiling_b64"], doc["soc"])
    cache, full = (_explained, key) if picture is None else (_pictures, (*key, *picture))
    got = cache.get(full)
    if got is None:
        profile = service.store.snapshot.answers.profile(doc["soc"])  # a device-tuned table's, where it is one
        job = (key, list(req.shape), req.variant(), doc["params"], profile, doc["weight_period"] or None)
        s = service.scheduler
        await s.charge(clock.held())  # the loop time so far, before waiting for the worker
        if picture is None:
            got = await s.run(client_of(request), request.is_disconnected, explained, *job)
        else:
            got = await s.run(client_of(request), request.is_disconnected, draw, *job, *picture)
        clock.resumed()
        cache.put(full, got)
    return body, got


@router.get("/", include_in_schema=False)
def root() -> RedirectResponse:
    return RedirectResponse("/explorer")


@router.get("/explorer", response_class=HTMLResponse, include_in_schema=False)
def explorer_page() -> HTMLResponse:
    """The explorer page; its query string (soc, shape, dtype, ...) reproduces a view."""
    html = (resources.files("service") / "static" / "explorer.html").read_text(encoding="utf-8")
    return HTMLResponse(html, headers={"Cache-Control": "no-cache"})


@router.get("/static/explorer.js", include_in_schema=False)
def explorer_script() -> Response:
    js = (resources.files("service") / "static" / "explorer.js").read_bytes()
    return Response(js, media_type="text/javascript", headers={"Cache-Control": "no-cache"})


@router.post("/tiling/explain", responses=ERRORS)
async def tiling_explain(req: TilingRequest, service: ServiceDep, request: Request) -> Any:
    """The answer of ``POST /tiling`` (``answer``) and the explorer's data (``explain``): each core's
    element range and tiles, the UB buffers, the pipeline of one core of each kind, and the predicted
    time over tile size x core count for the answer's block size and BUFFER_NUM."""
    clock = LoopClock.of(request)
    try:
        body, explanation = await _explain(req, service, request, clock)
    except (BadRequest, InvalidTiling) as err:
        return refused(["body"], err, req)
    return Response(b'{"answer":' + body + b',"explain":' + explanation + b"}", media_type="application/json")


@router.post("/tiling/plot/{picture}", responses={**ERRORS, 200: {"content": {"image/svg+xml": {}, "image/png": {}}}})
async def tiling_plot(
    picture: Picture,
    req: TilingRequest,
    service: ServiceDep,
    request: Request,
    format: Literal["svg", "png"] = Query("svg"),
) -> Any:
    """One picture of the answer's tiling: ``core_map``, ``ub``, ``timeline`` or ``landscape``."""
    clock = LoopClock.of(request)
    try:
        _, body = await _explain(req, service, request, clock, (picture, format))
    except (BadRequest, InvalidTiling) as err:
        return refused(["body"], err, req)
    media = "image/svg+xml" if format == "svg" else "image/png"
    return Response(body, media_type=media, headers={"Cache-Control": "no-cache"})
