"""The tiling explorer: ``GET /explorer`` (a static page, no front-end build, nothing fetched from
outside), ``POST /tiling/explain`` (the answer of ``POST /tiling`` with the pictures' data) and
``POST /tiling/plot/{picture}`` (one of the four pictures, SVG or PNG).

The same request body and limits as ``POST /tiling``; a tiling the service refuses is refused here
with the same 422. The answer comes from the resolver on the event loop, as ``POST /tiling``'s does;
the explanation and the pictures are computed in a worker thread (scoring a slice and drawing take
tens to hundreds of milliseconds) and cached per request.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from importlib import resources
from typing import Any, Literal

from fastapi import APIRouter, Query
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from service.deps import ServiceDep, json_bytes
from service.routes.tiling import answer, refused
from service.schemas import ERRORS, TilingRequest
from tiling_model import BadRequest, InvalidTiling, TilingParams, compute_tiling
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


async def _explain(req: TilingRequest, service: ServiceDep) -> tuple[dict[str, Any], Explanation]:
    doc = answer(req, service.store, service.metrics, service.settings)
    key = (req.model_dump_json(), doc["tiling_b64"], doc["soc"])
    e = _explained.get(key)
    if e is None:
        period = doc["weight_period"] or None
        t = compute_tiling(list(req.shape), req.variant(), TilingParams(**doc["params"]), doc["soc"], "exact", period)
        e = await asyncio.to_thread(explain, t)
        _explained.put(key, e)
    return doc, e


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
async def tiling_explain(req: TilingRequest, service: ServiceDep) -> Any:
    """The answer of ``POST /tiling`` (``answer``) and the explorer's data (``explain``): each core's
    element range and tiles, the UB buffers, the pipeline of one core of each kind, and the predicted
    time over tile size x core count for the answer's block size and BUFFER_NUM."""
    try:
        doc, e = await _explain(req, service)
    except (BadRequest, InvalidTiling) as err:
        return refused(["body"], err, req)
    return json_bytes({"answer": doc, "explain": e.as_dict()})


@router.post("/tiling/plot/{picture}", responses={**ERRORS, 200: {"content": {"image/svg+xml": {}, "image/png": {}}}})
async def tiling_plot(
    picture: Picture, req: TilingRequest, service: ServiceDep, format: Literal["svg", "png"] = Query("svg")
) -> Any:
    """One picture of the answer's tiling: ``core_map``, ``ub``, ``timeline`` or ``landscape``."""
    from tiling_model.explorer_plot import render  # matplotlib loads on the first picture, not at start

    try:
        doc, e = await _explain(req, service)
    except (BadRequest, InvalidTiling) as err:
        return refused(["body"], err, req)
    key = (req.model_dump_json(), doc["tiling_b64"], picture, format)
    body = _pictures.get(key)
    if body is None:
        body = await asyncio.to_thread(render, e, picture, format)
        _pictures.put(key, body)
    media = "image/svg+xml" if format == "svg" else "image/png"
    return Response(body, media_type=media, headers={"Cache-Control": "no-cache"})
