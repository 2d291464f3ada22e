"""The FastAPI app: its state (table store, metrics, settings), the reload watcher, the routers of
``service/routes`` (one per concern), middleware and error handlers. Pydantic models are the contract."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import signal
import threading
from collections.abc import AsyncIterator
from importlib import metadata

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from fastapi_offline import FastAPIOffline
from starlette.exceptions import HTTPException as StarletteHTTPException

from service import logs
from service.config import Settings
from service.deps import Service, json_bytes
from service.errors import CatchAll, bcetune_error, validation_error
from service.limits import BodyLimit
from service.methods import HeadAndSlashes
from service.metrics import Metrics, MetricsMiddleware
from service.repeats import RepeatedBodies
from service.routes import explorer, health, tables, tiling
from service.routes import metrics as metrics_routes
from service.scheduler import Admission, Disconnected, Refused, Scheduler, refusal_body
from service.store import TableStore
from tiling_model import BcetuneError


def _version() -> str:
    try:
        return metadata.version("bcetune")
    except metadata.PackageNotFoundError:
        return "unknown"


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings.from_env()
    log = logs.setup(settings.log_level)
    store = TableStore(settings.tables_dir, settings.cache_mb << 20)
    metrics = Metrics()

    async def reload(reason: str) -> None:
        try:
            ok = await asyncio.to_thread(store.reload, reason)
        except Exception:  # a bug must not stop future reloads; the old tables keep serving
            log.exception("table reload crashed; still serving the previous tables")
            ok = False
        if ok or store.last_error is not None:  # a skipped reload (one running already) changes nothing
            metrics.reload_outcome(ok, store.last_error)
        if ok:
            settle_heap(unfreeze=True)  # the old tables' objects can go; the new ones join the frozen heap

    stopping = threading.Event()

    scheduler = Scheduler(
        settings.heavy_workers,
        settings.per_client,
        settings.max_queued,
        settings.heavy_share,
        on_job=lambda outcome: metrics.jobs.labels(outcome).inc(),
        warm=functools.partial(warm_worker, settings.default_soc),
    )

    def warm_up() -> None:
        """The explorer's first picture off the request path, in the background: the scheduler's worker
        processes start and, in their initializer, load matplotlib, its fonts and renderers (``warm_worker``;
        the cost model needs no warm-up: its engine is compiled when the package is installed). A thread,
        not a daemon: shutdown sets ``stopping``, stops the scheduler (which ends a warm-up still under way)
        and waits for it."""
        try:
            if not stopping.is_set():
                for started in scheduler.start_workers():
                    started.result()
        except Exception:  # noqa: BLE001 - /tiling/plot then pays it, or says what is missing
            if not stopping.is_set():  # a stop ends the warm-up's worker: not a failure
                log.exception("warming up the explorer's pictures failed")

    async def watch() -> None:
        """Poll the tables directory; nothing it meets ends it (a failed check is logged, tried next time)."""
        while True:
            await asyncio.sleep(settings.reload_interval_s)
            try:
                changed = store.changed()
            except Exception:  # noqa: BLE001
                log.exception("checking the tables directory failed; trying again at the next interval")
                continue
            if changed:
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
        settle_heap()
        metrics.watch_gc()
        stopping.clear()  # a lifespan may run again (a test client per call): this life serves
        scheduler.start()
        warmer = threading.Thread(target=warm_up, name="warm-up-explorer")
        warmer.start()
        logs.event(
            log,
            logging.INFO,
            "service ready",
            tables=sorted(store.snapshot.tables),
            tables_dir=str(settings.tables_dir),
            default_soc=settings.default_soc,
        )
        yield
        stopping.set()
        if watcher:
            watcher.cancel()
        # the scheduler first: a warm-up still loading matplotlib under load (seen: > 10 s) ends with its worker
        await asyncio.to_thread(scheduler.shutdown)
        await asyncio.to_thread(warmer.join)
        metrics.unwatch_gc()

    # /docs and /redoc from the package's own copies of Swagger UI and ReDoc (fastapi-offline): FastAPI's
    # default pages load them from a CDN, blank on a machine without internet
    app = FastAPIOffline(
        title="bcetune",
        version=_version(),
        description="Tuned tilings for the Ascend C BinaryCrossEntropyGrad kernel on Ascend A2 NPUs.",
        lifespan=lifespan,
        redirect_slashes=False,  # HeadAndSlashes redirects, without echoing the Host header
        static_url="/docs-static",
    )
    app.state.service = Service(store, metrics, settings, scheduler)  # what the routes' dependencies read
    for router in (tiling.router, explorer.router, tables.router, health.router, metrics_routes.router):
        app.include_router(router)
    if settings.bench_endpoints:
        app.include_router(tiling.bench_router)
    app.add_exception_handler(StarletteHTTPException, http_error)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(BcetuneError, bcetune_error)
    app.add_exception_handler(Refused, refused_error)  # type: ignore[arg-type]
    app.add_exception_handler(Disconnected, gone)
    app.add_middleware(CatchAll)  # innermost: metrics count its 500s
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    if settings.repeat_cache_mb:  # a repeated /tiling body: its answer's bytes again, nothing parsed
        app.add_middleware(RepeatedBodies, store=store, metrics=metrics, max_body=settings.max_body_bytes,
                           capacity_bytes=settings.repeat_cache_mb << 20)  # fmt: skip
    app.add_middleware(Admission, scheduler=scheduler)  # before a body is parsed or limited
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    app.add_middleware(HeadAndSlashes, routes=app.router.routes)  # outermost: HEAD is a GET from here on
    return app


async def http_error(_request: Request, e: StarletteHTTPException) -> Response:
    """FastAPI's own errors as the service's JSON; "error parsing the body" (e.g. not UTF-8) is a 422
    like every other bad body."""
    if e.status_code == 400:
        item = {"loc": ["body"], "msg": f"the body cannot be parsed as JSON: {e.detail}", "type": "json_invalid"}
        return json_bytes({"detail": [item]}, status_code=422)
    response = json_bytes({"detail": e.detail}, status_code=e.status_code)
    response.headers.update(e.headers or {})  # e.g. Allow on a 405
    return response


async def refused_error(_request: Request, e: Refused) -> Response:
    """The scheduler's refusal (429: the client's share; 503: the server's), with Retry-After."""
    headers = {"retry-after": str(e.retry_after)}
    return Response(refusal_body(e), status_code=e.status, media_type="application/json", headers=headers)


async def gone(_request: Request, _e: Exception) -> Response:
    """The client left while its request waited: nothing reaches it; 499 (nginx's "client closed
    request") is what the metrics and the access log count."""
    return Response(status_code=499)


def warm_worker(soc: str) -> None:
    """A worker process's first job: one explanation and each picture drawn once (imports, fonts)."""
    from model_tools.explain import explain
    from model_tools.explorer_plot import PICTURES, render
    from tiling_model import TilingParams, Variant, compute_tiling

    e = explain(compute_tiling([4096], Variant("float32", "none"), TilingParams(), soc))
    for picture in PICTURES:
        render(e, picture, "svg")


def settle_heap(unfreeze: bool = False) -> None:
    """Collect once, then freeze what survived (gc.freeze): the modules, tables and profiles that live as
    long as the process are no longer walked by every collection, which kept each cold request ~10%
    slower and made the long pauses under load. ``unfreeze`` first (after a table reload) lets what the
    old tables held be collected."""
    if unfreeze:
        gc.unfreeze()
    gc.collect()
    gc.freeze()


def app_factory() -> FastAPI:
    """For ``uvicorn --factory`` and multi-worker runs: settings come from BCETUNE_* variables."""
    return create_app(Settings.from_env())
