"""Cost isolation for the requests that cost far more than ``POST /tiling``: explanations, pictures and
batches. One scheduler admits them, shares the server between clients and keeps ``/tiling`` its
throughput.

- **Admission.** A client address has at most ``per_client`` expensive requests in flight (one HTTP/1.1
  connection has one at a time: its requests are answered in order); past it, a 429 with Retry-After,
  sent after that Retry-After (a client that ignores it retries once a second per connection).
  At most ``max_queued`` wait for the worker pool overall; past it, a 503 with Retry-After (shed: a
  refusal at once instead of a queue that answers late).
- **Pictures and explanations** run in a pool of worker processes at low CPU priority, never on the
  event loop or under its GIL: the process that answers ``/tiling`` does none of that work and keeps no
  matplotlib. Waiting jobs are served round robin by client address; a job whose client disconnects
  while it waits never runs (one already running finishes: a process is not interrupted mid-draw, and
  its result is cached).
- **One share of the CPU.** What the expensive requests cost is charged to one share (``heavy_share``)
  of a core: on the event loop, a batch's items (computed there: their answers are the cache's), an
  explanation's or picture's answer, and each one's body parsed and answer sent, timed from admission
  (``LoopClock``); in the workers, each job's CPU time (a worker's core is shared with the rest of the
  machine: the load balancer, the clients, the kernel's network stack). While other requests are in
  flight they get at most that share together: one over it waits before its answer, and waits again on
  waking while the others have spent it; alone they run at full speed.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import gc
import logging
import multiprocessing
import os
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

#: How often a waiting request checks that its client is still there.
DISCONNECT_POLL_S = 0.05
#: Expensive requests' work past their share that may run before one waits (a few cold items).
SHARE_BURST_S = 0.002
#: The scope key the admission middleware stamps an expensive request's admission time under.
ADMITTED_AT = "bcetune.admitted_at"
#: How long after another request was seen the expensive requests still count as sharing the CPU.
CONTENDED_FOR_S = 0.05


class Refused(Exception):
    """The scheduler refuses a request: 429 (the client's share is used) or 503 (the server's is)."""

    def __init__(self, status: int, msg: str, retry_after: int = 1) -> None:
        super().__init__(msg)
        self.status = status
        self.retry_after = retry_after


class Disconnected(Exception):
    """The client went away while its request waited: nothing to answer."""


def _timed(fn: Callable[..., Any], *args: Any) -> tuple[Any, float]:
    """A job in a worker, and the CPU time it took there (what ``Scheduler.run`` charges to the share)."""
    start = time.process_time()
    result = fn(*args)
    return result, time.process_time() - start


#: The nice level a worker's jobs run at: below the serving process, so /tiling wins a contended core.
WORKER_NICE = 19


def _worker_init(warm: Callable[[], None] | None = None) -> None:
    """A pool worker's initializer. Its start-up (``warm``: imports, fonts, a first picture) runs at the
    serving process's priority, and only then does the worker drop below it for its jobs: a bounded cost
    paid once, while readiness says so. Started at nice 19 instead, on a machine whose cores other
    processes keep busy, it got ~1.5% of a core for ~1.3 s of CPU and the first explanation timed out
    after 30 s (measured: two busy loops on two cores beside the service). A warm-up that fails is
    logged, not raised (a raising initializer breaks the pool for good): the first picture pays it, or
    says what is missing.

    A pool worker blocks on its job queue, whose write end it holds itself, so it never sees the service
    die: a watch thread ends it when its parent changes (a killed service)."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()
    if warm is not None:
        try:
            warm()
        except Exception:  # noqa: BLE001 - see the docstring
            logging.getLogger("bcetune.scheduler").exception("warming up a worker process failed")
    os.nice(WORKER_NICE)


@dataclass
class _Job:
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    done: asyncio.Future[Any]
    cancelled: bool = False


@dataclass
class Scheduler:
    workers: int = 1
    per_client: int = 4  # the explorer's one view: its four pictures at once
    max_queued: int = 32
    heavy_share: float = 0.1
    on_job: Callable[[str], None] | None = None  # told each job's outcome: done, cancelled, failed
    warm: Callable[[], None] | None = None  # each worker's start-up, before its first job (picklable)
    _pool: concurrent.futures.ProcessPoolExecutor | None = field(default=None, init=False, repr=False)
    _queues: OrderedDict[str, deque[_Job]] = field(default_factory=OrderedDict, init=False, repr=False)
    _in_flight: dict[str, int] = field(default_factory=dict, init=False, repr=False)
    _running: int = field(default=0, init=False)
    _cheap_in_flight: int = field(default=0, init=False)
    _debt_s: float = field(default=0.0, init=False)  # CPU time the expensive requests spent past their share
    _debt_at: float = field(default_factory=time.monotonic, init=False)
    _cheap_seen_at: float = field(default=-1e9, init=False)
    _degraded: str | None = field(default=None, init=False)
    _stopped: bool = field(default=False, init=False)
    replacements: int = field(default=0, init=False)  # worker pools replaced after a worker died

    # the pool ------------------------------------------------------------------------------------
    def pool(self) -> concurrent.futures.ProcessPoolExecutor:
        if self._stopped:  # a pool made after the stop would outlive it (the warm-up thread asks late)
            raise RuntimeError("the scheduler is stopped")
        if self._pool is None:  # spawn: no fork of a process that runs threads and an event loop
            ctx = multiprocessing.get_context("spawn")
            self._pool = concurrent.futures.ProcessPoolExecutor(
                self.workers, ctx, initializer=_worker_init, initargs=(self.warm,)
            )
        return self._pool

    def start(self) -> None:
        """Serve again after a ``shutdown``: an app's lifespan may run more than once (a test client per
        call does), and each life starts its own pool."""
        self._stopped = False

    def start_workers(self) -> list[concurrent.futures.Future[int]]:
        """Start every worker now, not at the first request: one job per worker submitted at once (the
        executor starts a process per job while none is idle); each is done once its worker has warmed."""
        pool = self.pool()
        return [pool.submit(os.getpid) for _ in range(self.workers)]

    @property
    def degraded(self) -> str | None:
        """Why explanations and pictures cannot be served at full strength now (a worker died and its
        replacement is still starting), or None."""
        return self._degraded

    def _replace_pool(self, broken: concurrent.futures.ProcessPoolExecutor | None) -> None:
        """A worker died (killed, out of memory): the pool is broken for good, so it is replaced by a new
        one, warmed in the background; readiness says degraded until every new worker has warmed."""
        if self._stopped or (broken is not None and self._pool is not broken):
            return  # stopping, or replaced already
        self.replacements += 1
        self._count("worker_died")
        self._pool = None
        if broken is not None:
            broken.shutdown(wait=False, cancel_futures=True)
        self._degraded = "a worker process died; its replacement is starting"
        warming = [asyncio.wrap_future(f) for f in self.start_workers()]
        pool = self._pool

        def warmed(all_done: asyncio.Future[Any]) -> None:
            if self._pool is pool and not all_done.cancelled() and all_done.exception() is None:
                self._degraded = None

        asyncio.gather(*warming).add_done_callback(warmed)

    def shutdown(self, grace_s: float = 2.0) -> None:
        """Stop: queued jobs are cancelled, running ones get ``grace_s`` to finish, then their worker
        processes are terminated. A picture nobody will receive must not hold a SIGTERM (an orchestrator
        kills what does not stop in time, and a test's stop timed out behind a landscape being drawn)."""
        self._stopped = True
        pool, self._pool = self._pool, None
        if pool is None:
            return
        # the executor's own map of its worker processes and its manager thread: ProcessPoolExecutor has no
        # public handle on them before Python 3.14 (terminate_workers)
        workers = list((getattr(pool, "_processes", None) or {}).values())
        manager = getattr(pool, "_executor_manager_thread", None)
        pool.shutdown(wait=False, cancel_futures=True)
        deadline = time.monotonic() + grace_s
        for w in workers:
            w.join(max(0.0, deadline - time.monotonic()))
        for w in workers:
            if w.is_alive():
                w.terminate()
                w.join(5)
        # The workers are gone: the manager thread ends, and the queues it held are collected, which unlinks
        # their named semaphores. uvicorn ends a SIGTERM'd process by re-raising the signal, so no atexit runs:
        # queues still alive then leaked their semaphores, and the resource tracker printed a warning that is
        # not a JSON log line (1 stop in 8-10, measured).
        if manager is not None:
            manager.join(5)
        del pool, workers, manager
        gc.collect()

    @property
    def queued(self) -> int:
        return sum(len(q) for q in self._queues.values())

    # admission -----------------------------------------------------------------------------------
    def admit(self, client: str) -> None:
        """Count one more expensive request of ``client`` in flight, or refuse it (Refused)."""
        if self._in_flight.get(client, 0) >= self.per_client:
            raise Refused(429, f"this client has {self.per_client} explanation, picture or batch requests in "
                          "flight already; send the next when one is answered")  # fmt: skip
        self._in_flight[client] = self._in_flight.get(client, 0) + 1

    def release(self, client: str) -> None:
        left = self._in_flight.get(client, 1) - 1
        if left:
            self._in_flight[client] = left
        else:
            self._in_flight.pop(client, None)

    # pictures and explanations -------------------------------------------------------------------
    async def run(self, client: str, is_disconnected: Callable[[], Awaitable[bool]], fn: Callable[..., Any],
                  *args: Any) -> Any:  # fmt: skip
        """``fn(*args)`` in a worker process, in its turn among the clients waiting; the client must
        have been admitted. Disconnected where the client leaves while the job waits. Its CPU time in the
        worker is charged to the share (``charge``) before its result is returned."""
        if self.queued >= self.max_queued:
            raise Refused(503, f"{self.max_queued} explanations and pictures are waiting already; retry shortly")
        job = _Job(fn, args, asyncio.get_running_loop().create_future())
        self._queues.setdefault(client, deque()).append(job)
        self._dispatch()
        while True:
            done, _ = await asyncio.wait({job.done}, timeout=DISCONNECT_POLL_S)
            if done:
                result, cpu_s = job.done.result()
                if await is_disconnected():  # its client left: owed, not waited for by a task nobody
                    self.owe(cpu_s)  # awaits (such waits held a stop); the result is still cached
                else:
                    await self.charge(cpu_s)  # the worker's CPU: the share's, like the loop's
                return result
            if await is_disconnected():
                job.cancelled = True  # dropped from its queue when its turn comes; a running job finishes
                raise Disconnected

    def _dispatch(self) -> None:
        while self._running < self.workers and self._queues:
            client, queue = next(iter(self._queues.items()))
            job = queue.popleft()
            if queue:
                self._queues.move_to_end(client)  # round robin: the next waiting client goes first
            else:
                del self._queues[client]
            if job.cancelled:
                self._count("cancelled")
                continue
            pool = self.pool()
            try:
                future = pool.submit(_timed, job.fn, *job.args)
            except concurrent.futures.BrokenExecutor:  # it broke between two jobs: replaced, tried once more
                self._replace_pool(pool)
                pool = self.pool()
                future = pool.submit(_timed, job.fn, *job.args)
            self._running += 1
            wrapped = asyncio.wrap_future(future)
            wrapped.add_done_callback(functools.partial(self._finished, job, pool))

    def _count(self, outcome: str) -> None:
        if self.on_job is not None:
            self.on_job(outcome)

    def _finished(self, job: _Job, pool: concurrent.futures.ProcessPoolExecutor, f: asyncio.Future[Any]) -> None:
        self._running -= 1
        error = None if f.cancelled() else f.exception()
        self._count("failed" if f.cancelled() or error is not None else "done")
        if isinstance(error, concurrent.futures.BrokenExecutor):
            self._replace_pool(pool)  # what the dead worker held is refused, never retried (it may be the cause)
            error = Refused(503, "the worker process making it died; it has been replaced: retry shortly")
        elif f.cancelled():  # the service is stopping
            error = Refused(503, "the service is stopping; retry shortly")
        if not job.done.done():
            if error is not None:
                job.done.set_exception(error)
            else:
                job.done.set_result(f.result())
        self._dispatch()

    # batches -------------------------------------------------------------------------------------
    def cheap_started(self) -> None:
        self._cheap_in_flight += 1
        self._cheap_seen_at = time.monotonic()

    def cheap_finished(self) -> None:
        self._cheap_in_flight -= 1
        self._cheap_seen_at = time.monotonic()

    def _contended(self, now: float) -> bool:
        """Other requests are in flight, or were a moment ago (a client between two requests)."""
        return self._cheap_in_flight > 0 or now - self._cheap_seen_at < CONTENDED_FOR_S

    async def charge(self, seconds: float) -> None:
        """Charge ``seconds`` of an expensive request's work (on the loop or in a worker); wait while the expensive
        requests are over their share and other requests are in flight (work-conserving: alone, one never
        waits). A request that wakes waits again while the others have spent the share meanwhile; one waiting
        stops within ``CONTENDED_FOR_S`` of the others' last request."""
        now = time.monotonic()
        if not self._contended(now):  # nobody else to share with: no debt, only a yield between items
            self._debt_s, self._debt_at = 0.0, now
            await asyncio.sleep(0)
            return
        self._repay(now)
        self._debt_s += seconds
        if self._debt_s <= SHARE_BURST_S:  # within the burst: only a yield
            await asyncio.sleep(0)
            return
        while self._debt_s > SHARE_BURST_S:
            # in slices: the wait ends within one once nobody else is in flight (a single sleep of the whole
            # debt, 9 s after a 1 s picture, outlived the others and held a stop)
            await asyncio.sleep(min(self._debt_s * (1 - self.heavy_share) / self.heavy_share, CONTENDED_FOR_S))
            now = time.monotonic()
            if not self._contended(now):
                self._debt_s, self._debt_at = 0.0, now
                return
            self._repay(now)

    def owe(self, seconds: float) -> None:
        """Charge work done after a request's answer went out, without waiting: the debt makes the next
        expensive requests wait (while others are in flight), as ``charge`` would have."""
        now = time.monotonic()
        if not self._contended(now):
            self._debt_s, self._debt_at = 0.0, now
            return
        self._repay(now)
        self._debt_s += seconds

    def _repay(self, now: float) -> None:
        """The time the others are owed (the expensive requests' time beyond their share) is repaid
        at share / (1 - share) per second of waiting."""
        repaid = (now - self._debt_at) * self.heavy_share / (1 - self.heavy_share)
        self._debt_s = max(0.0, self._debt_s - repaid)
        self._debt_at = now


class LoopClock:
    """The event loop's time an expensive request has held, lap by lap, from its admission (its body read
    and parsed, its route run) to each wait: what ``Scheduler.charge`` is given."""

    def __init__(self, since: float) -> None:
        self._since = since

    @classmethod
    def of(cls, request: Any) -> LoopClock:
        """The clock the admission started for this request (a fresh one where none did)."""
        clock = request.scope.get(ADMITTED_AT)
        return clock if isinstance(clock, LoopClock) else cls(time.perf_counter())

    def held(self) -> float:
        """The time since admission or the last wait, and a new lap from now."""
        now = time.perf_counter()
        held, self._since = now - self._since, now
        return held

    def resumed(self) -> None:
        """Back on the loop after a wait: the lap starts now."""
        self._since = time.perf_counter()


def client_of(request: Any) -> str:
    """The client's address: what its share is counted by."""
    return _address(request.scope)


def _address(scope: dict[str, Any]) -> str:
    client = scope.get("client")
    return str(client[0]) if client else "unknown"


EXPENSIVE_PATHS = ("/tiling/batch", "/tiling/explain")
EXPENSIVE_PREFIX = "/tiling/plot/"


class Admission:
    """Pure ASGI middleware: an expensive request (batch, explanation, picture) is admitted by the
    scheduler before its body is parsed (a refusal costs no validation), and released when answered;
    every other request is counted as in flight (what a batch's share yields to)."""

    def __init__(self, app: Any, scheduler: Scheduler) -> None:
        self.app = app
        self.scheduler = scheduler

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        s = self.scheduler
        if path in EXPENSIVE_PATHS or path.startswith(EXPENSIVE_PREFIX):
            client = _address(scope)
            try:
                s.admit(client)
            except Refused as e:
                # the refusal comes after its Retry-After: a client that retries at once (ignoring it)
                # makes one request a second per connection, not thousands of cheap refusals
                await asyncio.sleep(e.retry_after)
                await refuse(send, e)
                return
            clock = LoopClock(time.perf_counter())
            scope[ADMITTED_AT] = clock

            async def charged_send(message: dict[str, Any]) -> None:
                """Every answer, a refusal (422, 503) as much as a picture, pays its loop time to the share
                before it goes out: a client sending requests that are parsed and then refused pays too."""
                if message["type"] == "http.response.start":
                    await s.charge(clock.held())
                    clock.resumed()
                await send(message)

            try:
                await self.app(scope, receive, charged_send)
                # the tail after the answer started: its body sent, exception handling, the parsed request let
                # go (a refused 256-item batch's objects cost a third of its time there): owed, not waited for
                # here (this client has its answer; a finished task must not hold a shutdown): the next wait's
                s.owe(clock.held())
            finally:
                s.release(client)
            return
        s.cheap_started()
        try:
            await self.app(scope, receive, send)
        finally:
            s.cheap_finished()


def refusal_body(e: Refused) -> bytes:
    """The service's JSON error for a refusal (its Retry-After goes in a header)."""
    return orjson.dumps({"detail": [{"loc": [], "msg": str(e), "type": f"http_{e.status}"}]})


async def refuse(send: Any, e: Refused) -> None:
    """A refusal sent from ASGI middleware, before any route: its JSON error with Retry-After."""
    body = refusal_body(e)
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body)),
               (b"retry-after", b"%d" % e.retry_after)]  # fmt: skip
    await send({"type": "http.response.start", "status": e.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
