"""``POST /tiling`` and ``/tiling/batch``: tuned tilings, from the tables or the cost model."""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import ValidationError

from service.answers import Query
from service.bodies import OrjsonRoute
from service.config import Settings
from service.deps import ServiceDep, json_bytes
from service.errors import domain_item, error_response
from service.metrics import Metrics
from service.scheduler import Disconnected, LoopClock
from service.schemas import ERRORS, BatchRequest, BatchResponse, TilingRequest, TilingResponse
from service.store import TableStore
from tiling_model import BadRequest, InvalidTiling
from tiling_model.tiling import KNOB_NAMES

router = APIRouter(tags=["tiling"], route_class=OrjsonRoute)  # bodies parsed by orjson


def refused(loc: list[str | int], e: BadRequest | InvalidTiling, req: TilingRequest) -> Response:
    """A request the model refuses, pointing at the knob (or field) that caused it."""
    given = tuple(k for k, _ in req.params.given()) if req.params else ()
    field = getattr(e, "field", None)
    where: list[str | int] = [*loc, "params"] if field in KNOB_NAMES or isinstance(e, InvalidTiling) else loc
    return error_response([domain_item(e, where, given)])


class OverBudget(Exception):
    """The batch spent its server-time budget on uncached answers."""


class Budget:
    """Server time a batch may spend on answers not cached yet (a batch counts as its items)."""

    def __init__(self, seconds: float) -> None:
        self.left = seconds


def answer(
    req: TilingRequest, store: TableStore, metrics: Metrics, settings: Settings, budget: Budget | None = None
) -> bytes:
    """The answer to one request as JSON bytes: from the cache, else computed here, on the event loop (a
    cold answer costs well under a millisecond: no thread hand-off, no GIL contention between worker
    threads)."""
    answers = store.snapshot.answers
    given = req.params.given() if req.params else ()
    q = Query(req.soc or settings.default_soc, tuple(req.shape), req.variant(), given, req.weight_broadcast().period)
    got = answers.cached(q)
    if got is None:
        if budget is not None and budget.left <= 0:
            raise OverBudget
        start = time.perf_counter()
        try:
            got = answers.answer(q)
        finally:
            if budget is not None:
                budget.left -= time.perf_counter() - start
    body, source = got
    metrics.sources.labels(source).inc()
    return body


def json_body(body: bytes, status_code: int = 200) -> Response:
    """JSON that is already encoded (a cached answer, or answers spliced into a batch)."""
    return Response(body, status_code=status_code, media_type="application/json")


@router.post("/tiling", response_model=TilingResponse, responses=ERRORS)
async def tiling(req: TilingRequest, service: ServiceDep) -> Any:
    """Tiling for one call: tuned (from the table or the cost model), with any knobs the request fixes."""
    try:
        return json_body(answer(req, service.store, service.metrics, service.settings))
    except (BadRequest, InvalidTiling) as e:
        return refused(["body"], e, req)


@router.post("/tiling/batch", response_model=BatchResponse, responses=ERRORS)
async def tiling_batch(batch: BatchRequest, service: ServiceDep, request: Request) -> Any:
    """Up to the service's max batch of /tiling requests in one call, answered in order (its items not
    cached yet within the batches' share of the server: ``service.scheduler``)."""
    store, metrics, settings = service.store, service.metrics, service.settings
    if len(batch.requests) > settings.max_batch:
        item: dict[str, Any] = {
            "loc": ["body", "requests"],
            "type": "too_long",
            "msg": f"{len(batch.requests)} requests; at most {settings.max_batch} per batch",
        }
        return json_bytes({"detail": [item]}, status_code=422)
    out: list[bytes] = []
    budget = Budget(settings.batch_budget_s)
    clock = LoopClock.of(request)  # every item's loop time, the body's parse before them, is the share's
    cold = 0
    for i, raw in enumerate(batch.requests):
        left = budget.left
        try:  # parsed in turn: a batch refused at an item never validates the items after it
            req = TilingRequest.model_validate(raw)
        except ValidationError as e:
            raise RequestValidationError(
                [{**err, "loc": ("body", "requests", i, *err["loc"])} for err in e.errors()]
            ) from None
        try:
            out.append(answer(req, store, metrics, settings, budget))
        except (BadRequest, InvalidTiling) as e:
            return refused(["body", "requests", i], e, req)
        except OverBudget:
            over: dict[str, Any] = {
                "loc": ["body", "requests", i],
                "type": "over_budget",
                "msg": f"the batch spent its {settings.batch_budget_s:g} s of server time on {i} answers not cached "
                "yet; they are cached now: send the batch again, or the rest on its own",
            }
            return error_response([over], status_code=503, headers={"retry-after": "1"})
        computed = budget.left < left  # not from the cache
        if computed or i % 16 == 15:  # charged to the share (and other requests let in between items)
            await service.scheduler.charge(clock.held())
            clock.resumed()
        if computed:
            cold += 1
            if cold % 16 == 0 and await request.is_disconnected():
                raise Disconnected  # what it computed is cached; the rest is not worth computing
    return json_body(b'{"responses":[' + b",".join(out) + b"]}")  # its last lap charged as it goes out


bench_router = APIRouter(include_in_schema=False, route_class=OrjsonRoute)


@bench_router.post("/bench/trivial")
async def trivial(req: TilingRequest) -> Any:
    """The load benchmark's baseline: validated like /tiling, no tiling work (--bench-endpoints)."""
    return json_bytes({"ok": True, "dims": len(req.shape)})
