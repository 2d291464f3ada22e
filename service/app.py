"""FastAPI app: thin routes over the table store and resolver; pydantic models are the contract."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import AsyncIterator
from importlib import metadata
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException

from service import logs
from service.config import Settings
from service.limits import BodyLimit
from service.metrics import Metrics, MetricsMiddleware
from service.resolver import Query
from service.schemas import (
    BatchRequest,
    BatchResponse,
    ErrorResponse,
    ReadyResponse,
    SocInfo,
    TablesResponse,
    TilingRequest,
    TilingResponse,
)
from service.store import TableStore
from tiling_model import InvalidTiling, known_socs, load_soc

ERRORS: dict[int | str, dict[str, Any]] = {
    413: {"model": ErrorResponse, "description": "request body over the size limit"},
    422: {"model": ErrorResponse, "description": "a field breaks a rule (loc names it, msg says which)"},
}


def JSONBytes(content: Any, status_code: int = 200) -> Response:  # noqa: N802
    """A JSON response serialised by orjson (the cached answers are plain dicts)."""
    return Response(orjson.dumps(content), status_code=status_code, media_type="application/json")


def _invalid(loc: list[str | int], e: InvalidTiling) -> Response:
    item = {"loc": loc, "msg": str(e), "type": "invalid_tiling", "violations": e.violations}
    return JSONBytes({"detail": [item]}, status_code=422)


def _version() -> str:
    try:
        return metadata.version("bcetune")
    except metadata.PackageNotFoundError:
        return "unknown"


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings.from_env()
    log = logs.setup(settings.log_level)
    store = TableStore(settings.tables_dir)
    metrics = Metrics()

    async def reload(reason: str) -> None:
        try:
            ok = await asyncio.to_thread(store.reload, reason)
        except Exception:  # a bug must not stop future reloads; the old tables keep serving
            log.exception("table reload crashed; still serving the previous tables")
            ok = False
        metrics.reloads.labels("ok" if ok else "refused").inc()

    async def watch() -> None:
        while True:
            await asyncio.sleep(settings.reload_interval_s)
            if store.changed():
                await reload("file change")

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        loop = asyncio.get_running_loop()

        pending: set[asyncio.Task] = set()  # keep references: the loop holds tasks only weakly

        def on_sighup() -> None:
            task = loop.create_task(reload("SIGHUP"))
            pending.add(task)
            task.add_done_callback(pending.discard)

        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signal.SIGHUP, on_sighup)
        watcher = loop.create_task(watch()) if settings.reload_interval_s > 0 else None
        logs.event(
            log,
            logging.INFO,
            "service ready",
            tables=sorted(store.snapshot.tables),
            tables_dir=str(settings.tables_dir),
            default_soc=settings.default_soc,
        )
        yield
        if watcher:
            watcher.cancel()

    app = FastAPI(
        title="bcetune",
        version=_version(),
        description="Tuned tilings for the Ascend C BinaryCrossEntropyGrad kernel on Ascend A2 NPUs.",
        lifespan=lifespan,
    )
    app.state.store = store
    app.state.metrics = metrics
    app.state.settings = settings

    def query(req: TilingRequest) -> Query:
        given = req.params.given() if req.params else ()
        return Query(req.soc or settings.default_soc, tuple(req.shape), req.variant(), given)

    async def answer(req: TilingRequest) -> dict[str, Any]:
        resolver = store.snapshot.resolver
        q = query(req)
        doc = resolver.cached(q)
        if doc is None:  # new request: compute off the event loop
            doc = await asyncio.to_thread(resolver.resolve, q)
        metrics.sources.labels(doc["source"]).inc()
        return doc

    @app.post("/tiling", response_model=TilingResponse, responses=ERRORS)
    async def tiling(req: TilingRequest) -> Any:
        """Tiling for one call: tuned (from the table or the cost model), with any knobs the request fixes."""
        try:
            return JSONBytes(await answer(req))
        except InvalidTiling as e:
            return _invalid(["body", "params"], e)

    @app.post("/tiling/batch", response_model=BatchResponse, responses=ERRORS)
    async def tiling_batch(batch: BatchRequest) -> Any:
        """Up to the service's max batch of /tiling requests in one call, answered in order."""
        if len(batch.requests) > settings.max_batch:
            item = {
                "loc": ["body", "requests"],
                "type": "too_long",
                "msg": f"{len(batch.requests)} requests; at most {settings.max_batch} per batch",
            }
            return JSONBytes({"detail": [item]}, status_code=422)
        out = []
        for i, req in enumerate(batch.requests):
            try:
                out.append(await answer(req))
            except InvalidTiling as e:
                return _invalid(["body", "requests", i, "params"], e)
        return JSONBytes({"responses": out})

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        """The process is up."""
        return {"status": "ok"}

    @app.get("/readyz", response_model=ReadyResponse, responses={503: {"model": ReadyResponse}})
    async def readyz() -> Any:
        """Tables loaded and checked (the service never starts without them)."""
        snap = store.snapshot
        doc = {"ready": snap is not None, "tables": len(snap.tables), "socs": sorted(snap.tables)}
        return JSONBytes(doc, status_code=200 if doc["ready"] else 503)

    @app.get("/socs", response_model=list[SocInfo])
    async def socs() -> Any:
        """The SoC profiles the service knows."""
        out = []
        for name in known_socs():
            p = load_soc(name)
            out.append(
                {
                    "name": p.name,
                    "family": p.family,
                    "aiv_cores": p.aiv_cores,
                    "ub_bytes": p.ub_bytes,
                    "ub_usable_bytes": p.ub_usable_bytes,
                    "clock_mhz": p.clock_mhz,
                    "hbm_gbps": p.hbm_gbps,
                    "hbm_peak_gbps": p.hbm_peak_gbps,
                    "l2_bytes": p.l2_bytes,
                    "launch_us": p.launch_us,
                    "profile_hash": p.profile_hash,
                    "calibrated": p.calibration is not None,
                }
            )
        return JSONBytes(out)

    @app.get("/tables", response_model=TablesResponse)
    async def tables() -> Any:
        """Per SoC: provenance, entry counts and staleness against the running code."""
        out = []
        for soc, lt in sorted(store.snapshot.tables.items()):
            t = lt.table
            reasons = lt.stale_reasons()
            out.append(
                {
                    "soc": soc,
                    "path": str(lt.path),
                    "schema_version": t.schema_version,
                    "backend": t.backend,
                    "created": t.created,
                    "entries": len(t.entries),
                    "invalid_entries": len(lt.invalid),
                    "soc_profile_hash": t.soc_profile_hash,
                    "kernel_hash": t.kernel_hash,
                    "stale": bool(reasons),
                    "stale_reasons": reasons,
                }
            )
        return JSONBytes({"tables": out, "reloads": store.reloads, "last_reload_error": store.last_error})

    @app.get("/metrics", response_class=PlainTextResponse)
    async def prometheus() -> Any:
        """Prometheus text format."""
        return PlainTextResponse(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    if settings.bench_endpoints:

        @app.post("/bench/trivial", include_in_schema=False)
        async def trivial(req: TilingRequest) -> Any:
            """The load benchmark's baseline: validated like /tiling, no tiling work."""
            return JSONBytes({"ok": True, "dims": len(req.shape)})

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request: Request, e: StarletteHTTPException) -> Response:
        if e.status_code == 400:  # FastAPI's "error parsing the body" (e.g. not UTF-8): a 422 like other bad bodies
            item = {"loc": ["body"], "msg": f"the body cannot be parsed as JSON: {e.detail}", "type": "json_invalid"}
            return JSONBytes({"detail": [item]}, status_code=422)
        response = JSONBytes({"detail": e.detail}, status_code=e.status_code)
        response.headers.update(e.headers or {})  # e.g. Allow on a 405
        return response

    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    return app


def app_factory() -> FastAPI:
    """For ``uvicorn --factory`` and multi-worker runs: settings come from BCETUNE_* variables."""
    return create_app(Settings.from_env())
