"""``POST /tiling`` and ``/tiling/batch``: tuned tilings, from the tables or the cost model."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response

from service.deps import MetricsDep, SettingsDep, StoreDep, json_bytes
from service.resolver import Query
from service.schemas import ERRORS, BatchRequest, BatchResponse, TilingRequest, TilingResponse
from tiling_model import InvalidTiling

router = APIRouter(tags=["tiling"])


def invalid(loc: list[str | int], e: InvalidTiling) -> Response:
    item = {"loc": loc, "msg": str(e), "type": "invalid_tiling", "violations": e.violations}
    return json_bytes({"detail": [item]}, status_code=422)


async def answer(req: TilingRequest, store: StoreDep, metrics: MetricsDep, settings: SettingsDep) -> dict[str, Any]:
    resolver = store.snapshot.resolver
    given = req.params.given() if req.params else ()
    q = Query(req.soc or settings.default_soc, tuple(req.shape), req.variant(), given)
    doc = resolver.cached(q)
    if doc is None:  # new request: compute off the event loop
        doc = await asyncio.to_thread(resolver.resolve, q)
    metrics.sources.labels(doc["source"]).inc()
    return doc


@router.post("/tiling", response_model=TilingResponse, responses=ERRORS)
async def tiling(req: TilingRequest, store: StoreDep, metrics: MetricsDep, settings: SettingsDep) -> Any:
    """Tiling for one call: tuned (from the table or the cost model), with any knobs the request fixes."""
    try:
        return json_bytes(await answer(req, store, metrics, settings))
    except InvalidTiling as e:
        return invalid(["body", "params"], e)


@router.post("/tiling/batch", response_model=BatchResponse, responses=ERRORS)
async def tiling_batch(batch: BatchRequest, store: StoreDep, metrics: MetricsDep, settings: SettingsDep) -> Any:
    """Up to the service's max batch of /tiling requests in one call, answered in order."""
    if len(batch.requests) > settings.max_batch:
        item = {
            "loc": ["body", "requests"],
            "type": "too_long",
            "msg": f"{len(batch.requests)} requests; at most {settings.max_batch} per batch",
        }
        return json_bytes({"detail": [item]}, status_code=422)
    out = []
    for i, req in enumerate(batch.requests):
        try:
            out.append(await answer(req, store, metrics, settings))
        except InvalidTiling as e:
            return invalid(["body", "requests", i, "params"], e)
    return json_bytes({"responses": out})


bench_router = APIRouter(include_in_schema=False)


@bench_router.post("/bench/trivial")
async def trivial(req: TilingRequest) -> Any:
    """The load benchmark's baseline: validated like /tiling, no tiling work (--bench-endpoints)."""
    return json_bytes({"ok": True, "dims": len(req.shape)})
