"""The HTTP/1.1 protocol the service runs: uvicorn's httptools protocol with the limits trusted
servers set by default, which uvicorn leaves open.

- Header size: a request whose request line and headers pass ``max_header_bytes`` (16 KiB, h11's
  default) gets a 431 and the connection is closed; at most one read more of it is buffered. The limit
  is per request: pipelined requests (several in one read) each have their own.
- Pipelining: requests sent back to back on one connection are answered in order (uvicorn queues them).
- Upgrades: the service speaks HTTP/1.1 only; a request asking for another protocol (h2c) is answered
  over HTTP/1.1, as RFC 9110 lets a server ignore Upgrade, and its connection closes after the answer.
- Request deadline: a request must arrive complete (headers and body) within ``request_timeout_s``
  of the connection opening or of its first byte; a slow or silent client gets a 408 and is cut
  off. Idle keep-alive connections close after uvicorn's ``timeout_keep_alive``.
- Connection cap: at ``limit_concurrency`` open connections, a new connection's first request closes
  the connection that has been idle longest, if for a second at least (an idle keep-alive connection
  may be closed at any time), and is served; only where none is does it get a JSON 503 with
  Retry-After (file descriptors run out first). A connection already served is not refused for the
  cap: it is counted already, and a flood of new connections must not cost established clients theirs.
- Shedding: where the requests in progress would take more than ``shed_wait_s`` (BCETUNE_SHED_WAIT,
  0.15 s) to answer at the rate the server has been answering them while busy (DrainRate; batches,
  explanations and pictures are neither counted nor timed: the scheduler admits them), or past
  ``max_active`` of them (BCETUNE_MAX_ACTIVE, 1024, a hard cap), a request gets a JSON 503 with
  Retry-After (1 s) at once rather than an answer seconds late: what is served is answered within about
  the deadline. A wait, not a count: one loop pass parses hundreds of requests before any of them runs,
  and cached answers drain ten times faster than cold ones. The connection is kept, and nothing more is
  read from it for a random part (0.5-1) of the Retry-After: a client that sends again at once (wrk, a
  hostile one) waits in its own socket instead of spinning on cheap 503s. Closed instead, such clients
  reconnected and were refused faster than they were answered (1,000 wrk connections, 30 s, cached mix,
  refused at 0.15 s: 6,984 answers beside 190,459 refusals; kept and held: ~85,000 answers beside
  ~18,000 refusals, ~90% of the answers with no shedding, whose queue of 1,000 clients took 0.3-0.6 s);
  held for the whole second, refused in one burst, they came back as the next burst.

The limits come from uvicorn's Config (``limit_concurrency``) and from BCETUNE_MAX_HEADER_BYTES and
BCETUNE_REQUEST_TIMEOUT (``python -m service`` sets them from its settings for every worker).
"""

from __future__ import annotations

import asyncio
import os
import random
import time
import types
from collections import OrderedDict, deque
from typing import Any

import httptools
import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

DEFAULT_MAX_HEADER_BYTES = 16384
DEFAULT_REQUEST_TIMEOUT_S = 10.0
DEFAULT_MAX_ACTIVE = 1024  # Settings.max_active
DEFAULT_SHED_WAIT_S = 0.15  # Settings.shed_wait_s
SHED_RETRY_AFTER_S = 1  # a shed refusal's Retry-After, and how long its connection's reads are held
MIN_IDLE_S = 1.0  # what an idle connection must have been idle for to be closed for another's request

_REASONS = {408: b"Request Timeout", 431: b"Request Header Fields Too Large", 503: b"Service Unavailable"}


class DrainRate:
    """Requests answered per second while others wait: the server's capacity as measured, what the
    shedding divides the requests in progress by. One per server (all its connections), smoothed over
    windows of WINDOW_S in which requests were waiting from start to end (an idle spell says nothing)."""

    WINDOW_S = 0.1

    def __init__(self, per_s: float = 2000.0) -> None:
        self.per_s = per_s
        self._since = time.monotonic()
        self._done = 0
        self._busy_from_start = False

    def answered(self, waiting: int) -> None:
        """One answer complete, ``waiting`` requests still in progress."""
        self._done += 1
        now = time.monotonic()
        span = now - self._since
        if span >= self.WINDOW_S:
            if self._busy_from_start and waiting > 0:
                self.per_s = 0.7 * self.per_s + 0.3 * (self._done / span)
            self._since, self._done, self._busy_from_start = now, 0, waiting > 0

    def wait_s(self, in_progress: int) -> float:
        """How long ``in_progress`` requests take to answer at the measured rate."""
        return in_progress / self.per_s


_REFUSED = types.SimpleNamespace(
    response_complete=True, keep_alive=True, disconnected=False, message_event=types.SimpleNamespace(set=lambda: None)
)
"""The cycle of a request refused on a kept connection: finished (so uvicorn drops its body and never marks
it disconnected or closing), with nothing waiting on its event: one stand-in serves every connection."""


JUDGED, EXPENSIVE, REFUSAL = "judged", "expensive", "refusal"  # what an admitted request is
EXPENSIVE_PREFIX = b"/tiling/"  # batches, explanations, pictures: the scheduler admits them, not the shedding


class InProgress:
    """The expensive requests in progress (one count per server, one at most per connection), which the
    shedding neither counts nor times: they wait for the scheduler's share and queue (a few slow pictures
    in progress must not read as a backlog of seconds), and their answers would make the drain rate theirs."""

    def __init__(self) -> None:
        self.n = 0


def _error_body(status: int, msg: str) -> bytes:
    """The service's JSON error (service.errors' shape) for an answer the protocol writes itself."""
    return orjson.dumps({"detail": [{"loc": [], "msg": msg, "type": f"http_{status}"}]})


class _Refuse(Exception):
    def __init__(self, status: int, msg: str) -> None:
        super().__init__(msg)
        self.status = status


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """HttpToolsProtocol with a header-size limit, a per-request deadline and a JSON 503 at the cap."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._headers_done = True  # no request in progress
        self._header_bytes = 0  # request line and headers as parsed
        self._pending_bytes = 0  # raw bytes received while the headers were incomplete
        self._began_in_read = False  # a request began within the read being parsed
        self._deferred: bytes | None = None  # a refusal waiting for the answers before it
        self._refused = False  # refused and closing: nothing more is read
        # what each request admitted on this connection is, in order (uvicorn answers in order)
        self._kinds: deque[str] = deque()
        self._expensive: InProgress = self.server_state.__dict__.setdefault("bcetune_expensive", InProgress())
        self._held: asyncio.TimerHandle | None = None  # reads held for a refusal's Retry-After
        self._served = False  # an answer completed on this connection: past the cap's check
        # the server's idle connections, longest idle first (one registry per server, O(1) to evict)
        self._idle: OrderedDict[GuardedHttpToolsProtocol, float] = self.server_state.__dict__.setdefault(
            "bcetune_idle", OrderedDict()
        )
        self.connection_cap, self.limit_concurrency = self.limit_concurrency, None  # uvicorn's check is ours
        # connections this server has closed whose close has not completed yet (their connection_lost comes a
        # loop pass later): not counted against the cap, or each refusal's reconnect would be refused too
        self._closing: set[GuardedHttpToolsProtocol] = self.server_state.__dict__.setdefault("bcetune_closing", set())
        self.max_active = int(os.environ.get("BCETUNE_MAX_ACTIVE", DEFAULT_MAX_ACTIVE))
        self.shed_wait_s = float(os.environ.get("BCETUNE_SHED_WAIT", DEFAULT_SHED_WAIT_S))
        self._drain: DrainRate = self.server_state.__dict__.setdefault("bcetune_drain", DrainRate())
        self.max_header_bytes = int(os.environ.get("BCETUNE_MAX_HEADER_BYTES", DEFAULT_MAX_HEADER_BYTES))
        self.request_timeout_s = float(os.environ.get("BCETUNE_REQUEST_TIMEOUT", DEFAULT_REQUEST_TIMEOUT_S))

    # the deadline -------------------------------------------------------------------------------
    def _arm(self) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(self.request_timeout_s, self._too_slow)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _too_slow(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        msg = f"the request did not arrive complete within {self.request_timeout_s:g} s"
        slow = self.cycle if self._headers_done else None  # the slow request's cycle, once its headers came
        if slow is _REFUSED:  # refused (answered) while its body was still to come: no second answer
            self._close()
            return
        if slow is not None and not slow.response_complete:  # its body is what is late
            slow.disconnected = True  # the app's receive() now answers http.disconnect
            slow.message_event.set()
            if slow.response_started:
                self._close()
                return
            for queued in [item for item in self.pipeline if item[0] is slow]:  # pipelined: never to run
                self.pipeline.remove(queued)
        self._refuse(408, msg)

    def _busy(self) -> bool:
        """Earlier requests on this connection are still being answered (or queued behind one); a
        request cut off as too slow is not one of them."""
        c = self.cycle
        return bool(self.pipeline) or (c is not None and not c.response_complete and not c.disconnected)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._served = True
        kind = self._kinds.popleft() if self._kinds else REFUSAL
        self._expensive.n += self._running_expensive() - (kind == EXPENSIVE)
        if kind == JUDGED:
            self._drain.answered(self._judged())
        if not self.pipeline:
            self._idle[self] = time.monotonic()  # idle from now: the newest
        if self._deferred is not None and not self._busy():
            self._write_and_close(self._deferred)

    def _write_and_close(self, payload: bytes) -> None:
        self._deferred = None
        if not self.transport.is_closing():
            self.transport.write(payload)
            self._close()

    def _close(self) -> None:
        """Close the connection, counted as gone for the cap from now (its connection_lost comes later)."""
        self._closing.add(self)
        self.transport.close()

    def _refuse(self, status: int, msg: str, retry_after: int | None = None) -> None:
        """Answer ``status`` with the service's JSON error and close the connection: after the answers
        to the requests before it on the connection (pipelined), in order."""
        self._refused = True
        self._disarm()
        body = _error_body(status, msg)
        head = [
            b"HTTP/1.1 %d %s\r\n" % (status, _REASONS[status]),
            b"content-type: application/json\r\n",
            b"content-length: %d\r\n" % len(body),
            b"connection: close\r\n",
        ]
        if retry_after is not None:
            head.append(b"retry-after: %d\r\n" % retry_after)
        payload = b"".join(head) + b"\r\n" + body
        if self._busy():
            self._deferred = payload  # nothing more is read: _refused drops what arrives
        else:
            self._write_and_close(payload)

    # protocol events ----------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._idle[self] = time.monotonic()
        self._arm()  # a connection that never sends a request is cut off too

    def connection_lost(self, exc: Exception | None) -> None:
        self._expensive.n -= self._running_expensive()  # left unanswered: no longer in progress
        self._kinds.clear()
        self._disarm()
        if self._held is not None:
            self._held.cancel()
            self._held = None
        self._idle.pop(self, None)
        self._closing.discard(self)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        self._unset_keepalive_if_required()
        self._began_in_read = False
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            # the request is complete and its cycle runs (httptools stops after it): answered over
            # HTTP/1.1, then the connection closes (the parser reads nothing more on it)
            if self.cycle is not None:
                self.cycle.keep_alive = False
            else:
                self._close()
            return
        except httptools.HttpParserError as e:
            # httptools wraps an exception raised in a callback (ours: _Refuse) as this error's context
            refusal = e.__context__ if isinstance(e.__context__, _Refuse) else e.__cause__
            if isinstance(refusal, _Refuse):
                self._refuse(refusal.status, str(refusal), retry_after=1 if refusal.status == 503 else None)
            else:
                self.logger.warning("Invalid HTTP request received.")
                self.send_400_response("Invalid HTTP request received.")
            return
        if not self._headers_done:  # headers still arriving: what they have taken so far, raw
            # A request that began in this read shares it with the requests before it: only later
            # reads count whole (its parsed url and headers are counted exactly, in _count).
            self._pending_bytes = self._header_bytes if self._began_in_read else self._pending_bytes + len(data)
            if self._pending_bytes > self.max_header_bytes:
                self._refuse(431, f"request line and headers are over {self.max_header_bytes} bytes")

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._headers_done = False
        self._header_bytes = 0
        self._pending_bytes = 0
        self._began_in_read = True
        self._idle.pop(self, None)
        if self._deadline is None:
            self._arm()

    def on_url(self, url: bytes) -> None:
        self._count(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count(len(name) + len(value) + 4)
        super().on_header(name, value)

    def _count(self, n: int) -> None:
        self._header_bytes += n
        if self._header_bytes > self.max_header_bytes:
            raise _Refuse(431, f"request line and headers are over {self.max_header_bytes} bytes")

    def on_headers_complete(self) -> None:
        self._headers_done = True
        cap = self.connection_cap
        at_cap = cap is not None and not self._served and len(self.connections) - len(self._closing) >= cap
        if at_cap and not self._evict_idle():
            raise _Refuse(503, f"the server is at its limit of {cap} connections, none idle; retry shortly")
        expensive = self.url.startswith(EXPENSIVE_PREFIX)
        shed = self._shed(expensive)
        if shed is None:
            running = self._running_expensive()
            self._kinds.append(EXPENSIVE if expensive else JUDGED)
            self._expensive.n += self._running_expensive() - running
            super().on_headers_complete()
            return
        # Refused at once on the kept connection, its body read by the parser and dropped, then nothing
        # more read from it for (part of) its Retry-After: a client that retries at once waits that out in
        # its own socket instead of spinning on cheap 503s (closed, it reconnects: the module's doc).
        if not self._busy() and self.parser.should_keep_alive() and not self.parser.should_upgrade():
            self._refuse_kept(shed)  # the common case, written here: no task, no ASGI cycle
            return
        self._kinds.append(REFUSAL)  # behind others: the one running is unchanged
        app, self.app = self.app, self._refusal_app(shed)  # behind answers in progress: in its turn
        try:
            super().on_headers_complete()
        finally:
            self.app = app

    def _running_expensive(self) -> int:
        """1 where this connection's request in progress (the first of its admitted ones: uvicorn answers
        them one at a time, in order, each a task while it runs) is an expensive one."""
        return int(bool(self._kinds) and self._kinds[0] == EXPENSIVE)

    def _judged(self) -> int:
        """The requests in progress the shedding judges: the server's tasks but the expensive ones. A task
        outlives its answer until the end of the loop's pass, so the count holds the answers of the pass
        too, and count / rate is the backlog's wait plus about one pass: what a request read now waits
        (the parsed backlog alone missed the pass: at 1,000 connections it admitted 0.3 s of latency)."""
        return len(self.tasks) - self._expensive.n

    def _shed(self, expensive: bool) -> str | None:
        """Why this request is refused at once (the requests in progress are past their cap, or would take
        past the shedding wait at the measured rate); None: it is admitted."""
        if len(self.tasks) >= self.max_active:
            return f"the server has {self.max_active} requests in progress; retry shortly"
        if expensive:
            return None  # the scheduler's to admit (its share per client, its queue)
        wait = self._drain.wait_s(self._judged() + 1)
        if wait > self.shed_wait_s:
            return (
                f"the requests in progress would take {wait:.2f} s to answer, over {self.shed_wait_s:g} s; "
                "retry shortly"
            )
        return None

    def _refuse_kept(self, msg: str) -> None:
        """Answer the 503 now and keep the connection: the request's cycle is a finished stand-in, so the
        parser reads its body and drops it (uvicorn skips the body of a cycle whose response is complete)."""
        body = _error_body(503, msg)
        self.cycle = _REFUSED  # type: ignore[assignment]
        self.transport.write(
            b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
            b"retry-after: %d\r\n\r\n%s" % (len(body), SHED_RETRY_AFTER_S, body)
        )
        self.server_state.total_requests += 1
        self._served = True
        self._idle[self] = time.monotonic()
        self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive, self.timeout_keep_alive_handler)
        self._hold_after_refusal()

    def _refusal_app(self, msg: str) -> Any:
        """An ASGI app answering this request's 503 with Retry-After, then holding the connection's reads."""
        body = _error_body(503, msg)
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", b"%d" % len(body)),
            (b"retry-after", b"%d" % SHED_RETRY_AFTER_S),
        ]

        async def refuse(scope: Any, receive: Any, send: Any) -> None:
            await send({"type": "http.response.start", "status": 503, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            self._hold_after_refusal()

        return refuse

    def _hold_after_refusal(self) -> None:
        """Held for a random part of the Retry-After: connections refused in one burst come back spread out,
        not as the next burst (a client that honours the Retry-After is never held)."""
        self._hold(SHED_RETRY_AFTER_S * random.uniform(0.5, 1.0))

    def _hold(self, seconds: float) -> None:
        """Read nothing more from this connection for ``seconds`` (what was read already is parsed and
        answered in order). uvicorn's own pause (pipelining, a large body) resumes it sooner, if ever."""
        if self.transport.is_closing() or self._held is not None:
            return
        self.transport.pause_reading()
        self._held = self.loop.call_later(seconds, self._release)

    def _release(self) -> None:
        self._held = None
        if not self.transport.is_closing() and not self.flow.read_paused:
            self.transport.resume_reading()

    def _evict_idle(self) -> bool:
        """Close the connection idle longest (not this one: it has a request), if it has been idle
        MIN_IDLE_S at least (a keep-alive client between two requests is not idle); False where none is."""
        now = time.monotonic()
        while self._idle:
            oldest, since = next(iter(self._idle.items()))
            if now - since < MIN_IDLE_S:
                return False
            del self._idle[oldest]
            if not oldest.transport.is_closing():
                oldest._close()
                return True
        return False

    def on_message_complete(self) -> None:
        self._disarm()
        super().on_message_complete()
