"""The tiling explorer: ``GET /explorer`` (a static page, no front-end build, nothing fetched from
outside), ``POST /tiling/explain`` (the answer of ``POST /tiling`` with the pictures' data) and
``POST /tiling/plot/{picture}`` (one of the four pictures, SVG or PNG).

The same request body and limits as ``POST /tiling``; a tiling the service refuses is refused here
with the same 422. The answer comes from the resolver on the event loop, as ``POST /tiling``'s does;
the explanation and the pictures (scoring a slice and drawing take tens of milliseconds to seconds)
are computed in the scheduler's worker processes (``service.scheduler``: a share per client, 429 or 503
past it) and cached per request.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from importlib import resources
from typing import Any, Literal

import orjson
from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from service.deps import ServiceDep
from service.routes.tiling import answer, refused
from service.scheduler import client_of
from service.schemas import ERRORS, TilingRequest
from tiling_model import BadRequest, InvalidTiling, SocProfile, TilingData, TilingParams, compute_tiling
from tiling_model.explain import Explanation, explain

router = APIRouter(tags=["explorer"])
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


def explained(t: TilingData, profile: SocProfile) -> tuple[Explanation, bytes]:
    """The explanation and its JSON (a worker process's job: the serving process encodes nothing big)."""
    e = explain(t, profile)
    return e, orjson.dumps(e.as_dict(), option=orjson.OPT_SERIALIZE_NUMPY)


async def _explain(req: TilingRequest, service: ServiceDep, request: Request) -> tuple[bytes, Explanation, bytes]:
    """The answer's JSON, its explanation and the explanation's JSON."""
    body = answer(req, service.store, service.metrics, service.settings)
    doc: dict[str, Any] = orjson.loads(body)
    key = (req.model_dump_json(), doc["tiling_b64"], doc["soc"])
    got = _explained.get(key)
    if got is None:
        period = doc["weight_period"] or None
        profile = service.store.snapshot.resolver.profile(doc["soc"])  # a device-tuned table's, where it is one
        t = compute_tiling(list(req.shape), req.variant(), TilingParams(**doc["params"]), profile, "exact", period)
        got = await service.scheduler.run(client_of(request), request.is_disconnected, explained, t, profile)
        _explained.put(key, got)
    return body, got[0], got[1]


def draw(e: Explanation, picture: str, fmt: str) -> bytes:
    """One picture (a worker process's job: matplotlib loads there, never in the serving process)."""
    from tiling_model.explorer_plot import render

    return render(e, picture, fmt)


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
    try:
        body, _, explanation = await _explain(req, service, request)
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
    try:
        answer_body, e, _ = await _explain(req, service, request)
    except (BadRequest, InvalidTiling) as err:
        return refused(["body"], err, req)
    key = (req.model_dump_json(), orjson.loads(answer_body)["tiling_b64"], picture, format)
    body = _pictures.get(key)
    if body is None:
        body = await service.scheduler.run(client_of(request), request.is_disconnected, draw, e, picture, format)
        _pictures.put(key, body)
    media = "image/svg+xml" if format == "svg" else "image/png"
    return Response(body, media_type=media, headers={"Cache-Control": "no-cache"})
