"""The HTTP/1.1 protocol the bare service runs: uvicorn's httptools protocol with the limits trusted
servers set by default and uvicorn leaves open. In production a reverse proxy does this job in front
(``deploy/nginx``: per-address connection and request-rate limits, header, body and send timeouts);
these limits keep ``make run`` (one process, no proxy) safe on its own, and are what the proxy's
absence would otherwise leave open. Each is a fixed bound or a timer: nothing here estimates.

- Header size: a request whose request line and headers pass ``max_header_bytes`` (16 KiB, h11's
  default) gets a 431 and the connection is closed. Per request: pipelined requests each have their own.
- Body size: a Content-Length over ``max_body_bytes`` gets a 413 from its headers (no task, the body
  never read) and the connection closes 0.5-1 s later (answers before the close are read, not reset).
  Chunked bodies are counted by ``service.limits.BodyLimit``.
- Request deadline: a request must arrive complete (headers and body) within ``request_timeout_s`` of
  the connection opening or of its first byte; a slow or silent client gets a 408 and is cut off.
- Send deadline: a connection whose answers stay unread (the socket's buffer full) for ``send_timeout_s``
  is closed (its kernel buffers are the server's memory).
- Pipelining and half-close: requests sent back to back are answered in order (uvicorn queues them), a
  client's half-close (EOF) after them included: the answers are written, then the connection closes.
- Upgrades: HTTP/1.1 only; a request asking for another protocol (h2c) is answered over HTTP/1.1 and its
  connection closes after the answer (RFC 9110 lets a server ignore Upgrade).
- Per address (the socket's peer; a proxy named in ``forwarded_allow_ips`` is exempt: it enforces its
  clients' limits itself): at most ``per_address_connections`` open connections (past it the new one
  gets a 503 with Retry-After 5 and is closed 2.5-5 s later, at most 1,024 such held at once) and
  ``per_address_requests`` requests in progress, from their first byte (a request still arriving counts)
  to their answer (past it: 429 with Retry-After).
- Connection cap: at ``limit_concurrency`` open connections, a new connection's first request closes the
  connection idle longest, if for a second at least, and is served; where none is it gets a 503.
- Shedding (``service.shedding``): past ``max_active`` requests in flight, or while a standing queue is
  seen (requests' own waits from arrival to start over ``shed_wait_s`` for ``shed_interval_s``), a
  request gets a 503 with Retry-After at once, written here (no task, its body not parsed). A refused
  connection is kept, and nothing more is read from it for a random 0.5-1 s of its Retry-After: a
  client that retries at once (wrk, a hostile one) waits in its own socket instead of spinning on cheap
  refusals (closed, such clients reconnected and were refused faster than others were answered).

Settings come from BCETUNE_* variables (``python -m service`` sets them for every worker).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct
import time
import types
from collections import OrderedDict, defaultdict
from collections.abc import Callable
from typing import Any

import httptools
import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from service.config import Settings
from service.limits import too_large
from service.shedding import Shedder
from service.trust import TrustedProxies

RETRY_AFTER_S = 1  # a refusal's Retry-After, and how long its connection's reads are held at most
CONNECTIONS_RETRY_AFTER_S = 5  # an address past its connections: its next one is not due sooner
MAX_LINGERING = 1024  # refused connections held before their close at once; past it they close at once
MIN_IDLE_S = 1.0  # what an idle connection must have been idle for to be closed for another's request
EXPENSIVE_PREFIX = "/tiling/"  # batches, explanations, pictures (service.scheduler admits them)
QUEUED_AT = "bcetune.queued_at"  # scope key: when the request's task was made (its wait is measured from it)
HOLD = "bcetune.hold"  # scope key: holds the connection's reads after a refusal

_REASONS = {408: b"Request Timeout", 413: b"Content Too Large", 429: b"Too Many Requests",
            431: b"Request Header Fields Too Large", 503: b"Service Unavailable"}  # fmt: skip

_REFUSAL_HEADERS = [(b"content-type", b"application/json"), (b"retry-after", b"%d" % RETRY_AFTER_S)]

_REFUSED = types.SimpleNamespace(
    response_complete=True, keep_alive=True, disconnected=False, message_event=types.SimpleNamespace(set=lambda: None)
)
"""The cycle of a request refused on a kept connection: finished (so uvicorn drops its body and never marks
it disconnected or closing), with nothing waiting on its event: one stand-in serves every connection."""


def _error_body(status: int, msg: str) -> bytes:
    """The service's JSON error (service.errors' shape) for an answer the protocol writes itself."""
    return orjson.dumps({"detail": [{"loc": [], "msg": msg, "type": f"http_{status}"}]})


def _answer(status: int, msg: str, close: bool, retry_after: int | None = None, body: bytes = b"") -> bytes:
    body = body or _error_body(status, msg)
    head = [b"HTTP/1.1 %d %s\r\n" % (status, _REASONS[status]), b"content-type: application/json\r\n",
            b"content-length: %d\r\n" % len(body)]  # fmt: skip
    if close:
        head.append(b"connection: close\r\n")
    if retry_after is not None:
        head.append(b"retry-after: %d\r\n" % retry_after)
    return b"".join(head) + b"\r\n" + body


class _Server:
    """What the connections of one server share: its shedder, per-address counts, idle connections."""

    def __init__(self) -> None:
        settings = Settings.from_env()  # python -m service sets BCETUNE_* for every worker
        self.shedder = Shedder(settings.shed_wait_s, settings.shed_interval_s, settings.max_active)
        self.trusted = TrustedProxies(settings.forwarded_allow_ips)
        self.max_header_bytes = settings.max_header_bytes
        self.max_body_bytes = settings.max_body_bytes
        self.too_large_body = too_large(settings.max_body_bytes)  # the 413's body, made once
        self.request_timeout_s = settings.request_timeout_s
        self.send_timeout_s = settings.send_timeout_s
        self.per_address_connections = settings.per_address_connections
        self.per_address_requests = settings.per_address_requests
        self.lingering = 0  # refused connections held open before their close (at most MAX_LINGERING)
        self.connections_of: defaultdict[str, int] = defaultdict(int)
        self.requests_of: defaultdict[str, int] = defaultdict(int)
        # the server's idle connections, longest idle first (O(1) to evict)
        self.idle: OrderedDict[GuardedHttpToolsProtocol, float] = OrderedDict()
        # connections closed whose connection_lost has not come yet: not counted against the cap
        self.closing: set[GuardedHttpToolsProtocol] = set()
        self._observed: tuple[Any, Callable[..., Any]] | None = None  # (the app, it wrapped): uvicorn has one

    def observed(self, app: Any) -> Any:
        """``app`` telling the shedder when each request starts and how long it waited (one wrapper)."""
        if self._observed is not None and self._observed[0] is app:
            return self._observed[1]
        shedder, clock = self.shedder, time.monotonic

        async def wrapped(scope: Any, receive: Any, send: Any) -> None:
            queued = scope.get(QUEUED_AT)
            if queued is not None:
                now = clock()
                if shedder.started(now, now - queued):  # waited past the target in a standing queue
                    waited = f"{now - queued:.2f} s to start (over {shedder.target_s:g} s)"
                    msg = f"the request waited {waited}; retry shortly"
                    body = _error_body(503, msg)
                    headers = [*_REFUSAL_HEADERS, (b"content-length", b"%d" % len(body))]
                    await send({"type": "http.response.start", "status": 503, "headers": headers})
                    await send({"type": "http.response.body", "body": body})
                    scope[HOLD]()  # its body unread (dropped), its connection's reads held
                    return
            await app(scope, receive, send)

        self._observed = (app, wrapped)
        return wrapped


def _decrement(counts: defaultdict[str, int], key: str) -> None:
    left = counts[key] - 1
    if left > 0:
        counts[key] = left
    else:
        counts.pop(key, None)


class _Refuse(Exception):
    def __init__(self, status: int, msg: str, body: bytes = b"") -> None:
        super().__init__(msg)
        self.status = status
        self.body = body  # the answer's body where it is not the protocol's own error shape


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """HttpToolsProtocol with the limits of the module's doc."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.shared: _Server = self.server_state.__dict__.setdefault("bcetune", _Server())
        self.app = self.shared.observed(self.app)
        self.connection_cap, self.limit_concurrency = self.limit_concurrency, None  # uvicorn's check is ours
        self._deadline: asyncio.TimerHandle | None = None
        self._send_deadline: asyncio.TimerHandle | None = None
        self._held: asyncio.TimerHandle | None = None  # reads held for a refusal's Retry-After
        self._headers_done = True  # no request in progress
        self._header_bytes = 0  # request line and headers as parsed
        self._pending_bytes = 0  # raw bytes received while the headers were incomplete
        self._began_in_read = False  # a request began within the read being parsed
        self._deferred: bytes | None = None  # a refusal waiting for the answers before it
        self._refused = False  # refused and closing: nothing more is read
        self._served = False  # an answer completed on this connection: past the cap's check
        self._eof = False  # the client half-closed: close once what it sent is answered
        self._complete = True  # the last request begun has arrived whole
        self._address = ""  # the peer, where per-address limits apply ("" for a trusted proxy)
        self._requesting = False  # counted in requests_of[address]
        self._lingering = False  # counted in shared.lingering until its connection_lost

    # counts --------------------------------------------------------------------------------------
    def _request_begun(self) -> None:
        if self._address and not self._requesting:
            self._requesting = True
            self.shared.requests_of[self._address] += 1

    def _request_done(self) -> None:
        if self._requesting:
            self._requesting = False
            _decrement(self.shared.requests_of, self._address)

    # timers ------------------------------------------------------------------------------------------
    def _arm(self) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(self.shared.request_timeout_s, self._too_slow)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _too_slow(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        msg = f"the request did not arrive complete within {self.shared.request_timeout_s:g} s"
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

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._send_deadline is None:
            self._send_deadline = self.loop.call_later(self.shared.send_timeout_s, self._unread)

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._send_deadline is not None:
            self._send_deadline.cancel()
            self._send_deadline = None

    def _unread(self) -> None:
        """The client has not read its answers for the send deadline: the connection goes, reset (linger 0:
        a plain close leaves the unsent answers to the kernel, megabytes held until its orphan retries end)."""
        self._send_deadline = None
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.transport.abort()

    # writing and closing -------------------------------------------------------------------------
    def _busy(self) -> bool:
        """Earlier requests on this connection are still being answered (or queued behind one); a
        request cut off as too slow is not one of them."""
        c = self.cycle
        return bool(self.pipeline) or (c is not None and not c.response_complete and not c.disconnected)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._served = True
        if not self.pipeline:
            self._request_done()
            self.shared.idle[self] = time.monotonic()  # idle from now: the newest
        if self._deferred is not None and not self._busy():
            self._write_and_close(self._deferred)
        elif self._eof and not self._busy():
            self._close()  # the client half-closed: everything it sent is answered

    def _write_and_close(self, payload: bytes) -> None:
        self._deferred = None
        if not self.transport.is_closing():
            self.transport.write(payload)
            self._close()

    def _close(self) -> None:
        """Close the connection, counted as gone for the cap from now (its connection_lost comes later)."""
        self.shared.closing.add(self)
        self.transport.close()

    def _refuse(self, status: int, msg: str, retry_after: int | None = None, body: bytes = b"") -> None:
        """Answer ``status`` and close the connection: after the answers to the requests before it on the
        connection (pipelined), in order."""
        self._refused = True
        self._disarm()
        payload = _answer(status, msg, close=True, retry_after=retry_after, body=body)
        if self._busy():
            self._deferred = payload  # nothing more is read: _refused drops what arrives
        else:
            self._write_and_close(payload)

    def _linger(self, payload: bytes, retry_after_s: float) -> None:
        """Write ``payload`` (a refusal closing the connection), read nothing more, and close the connection a
        random 0.5-1 of ``retry_after_s`` later: a client that reconnects at once waits in its own socket
        meanwhile, and one that sent more than is read (a body refused unread) reads its answer before the
        close resets the connection. At most MAX_LINGERING at once (each holds a descriptor); past it the
        connection closes at once."""
        self._refused = True
        self._disarm()
        self.shared.closing.add(self)
        self.transport.pause_reading()
        self.transport.write(payload)
        if self.shared.lingering >= MAX_LINGERING:
            self.transport.close()
            return
        self.shared.lingering += 1
        self._lingering = True
        self._held = self.loop.call_later(retry_after_s * random.uniform(0.5, 1.0), self.transport.close)

    # protocol events ---------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        shared = self.shared
        host = self.client[0] if self.client else ""
        if host and host not in shared.trusted:
            self._address = host
            shared.connections_of[host] += 1
            if 0 < shared.per_address_connections < shared.connections_of[host]:
                # answered at once, closed 2.5-5 s later (_linger): a client that reconnects at once would
                # otherwise spin on refusals (measured: 6,000 a second from 400 connections); meanwhile it is
                # not counted against the connection cap (it reads nothing, and its answer is written)
                msg = f"this address has {shared.per_address_connections} connections open already"
                _decrement(shared.connections_of, host)  # refused: not one of the address's connections
                self._address = ""
                retry_s = CONNECTIONS_RETRY_AFTER_S
                self._linger(_answer(503, msg, close=True, retry_after=retry_s), retry_s)
                return
        shared.idle[self] = time.monotonic()
        self._arm()  # a connection that never sends a request is cut off too

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        for timer in (self._held, self._send_deadline):
            if timer is not None:
                timer.cancel()
        self._held = self._send_deadline = None
        if self._lingering:
            self._lingering = False
            self.shared.lingering -= 1
        self._request_done()
        if self._address:
            _decrement(self.shared.connections_of, self._address)
            self._address = ""
        self.shared.idle.pop(self, None)
        self.shared.closing.discard(self)
        super().connection_lost(exc)

    def eof_received(self) -> bool:  # type: ignore[override]
        """The client sent all it will: keep the connection open to write the answers to what it sent (a
        half-close after pipelined requests), then close it. A client that closed looks the same until a
        write fails, so where an explanation, picture or batch is in progress, the client is taken as gone
        (its queued job is dropped, not drawn for nobody); nothing in progress: close now."""
        self._eof = True
        c = self.cycle
        if not self._complete or c is None or self._refused:
            return False  # a request cut short can never be answered
        if not c.response_complete and c.scope["path"].startswith(EXPENSIVE_PREFIX):
            return False
        return self._busy()

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
            if isinstance(refusal, _Refuse) and refusal.status == 413 and not self._busy():
                # its body stays unread: the answer first, the close later, so the client reads the answer
                self._linger(_answer(413, str(refusal), close=True, body=refusal.body), RETRY_AFTER_S)
            elif isinstance(refusal, _Refuse):
                retry_after = RETRY_AFTER_S if refusal.status == 503 else None
                self._refuse(refusal.status, str(refusal), retry_after=retry_after, body=refusal.body)
            else:
                self.logger.warning("Invalid HTTP request received.")
                self.send_400_response("Invalid HTTP request received.")
            return
        if not self._headers_done:  # headers still arriving: what they have taken so far, raw
            # A request that began in this read shares it with the requests before it: only later
            # reads count whole (its parsed url and headers are counted exactly, in _count).
            self._pending_bytes = self._header_bytes if self._began_in_read else self._pending_bytes + len(data)
            if self._pending_bytes > self.shared.max_header_bytes:
                self._refuse(431, f"request line and headers are over {self.shared.max_header_bytes} bytes")

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._headers_done = False
        self._header_bytes = 0
        self._pending_bytes = 0
        self._began_in_read = True
        self._complete = False
        self.shared.idle.pop(self, None)
        self._request_begun()
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
        if self._header_bytes > self.shared.max_header_bytes:
            raise _Refuse(431, f"request line and headers are over {self.shared.max_header_bytes} bytes")

    def on_headers_complete(self) -> None:
        self._headers_done = True
        shared = self.shared
        length = next((value for name, value in self.headers if name == b"content-length"), b"")
        if length.isdigit() and int(length) > shared.max_body_bytes:  # refused before its body is read
            raise _Refuse(413, f"request body is over {shared.max_body_bytes} bytes", shared.too_large_body)
        cap = self.connection_cap
        at_cap = cap is not None and not self._served and len(self.connections) - len(shared.closing) >= cap
        if at_cap and not self._evict_idle():
            raise _Refuse(503, f"the server is at its limit of {cap} connections, none idle; retry shortly")
        status, why = 503, shared.shedder.refusal(time.monotonic(), len(self.tasks))
        if why is None and self._address and shared.requests_of[self._address] > shared.per_address_requests > 0:
            status, why = 429, (f"this address has {shared.per_address_requests} requests in progress; "
                                "send the next when one is answered")  # fmt: skip
        if why is None:
            super().on_headers_complete()
            return
        # Refused at once on the kept connection, its body read by the parser and dropped, then nothing
        # more read from it for (part of) its Retry-After.
        if not self._busy() and self.parser.should_keep_alive() and not self.parser.should_upgrade():
            self._refuse_kept(status, why)  # the common case, written here: no task, no ASGI cycle
            return
        app, self.app = self.app, self._refusal_app(status, why)  # behind answers in progress: in its turn
        try:
            super().on_headers_complete()
        finally:
            self.app = app

    def _start_asgi_task(self, cycle: Any, app: Any) -> None:
        cycle.scope[QUEUED_AT] = time.monotonic()  # its wait from now to its start is what shedding judges
        cycle.scope[HOLD] = self._hold_after_refusal
        super()._start_asgi_task(cycle, app)

    def _refuse_kept(self, status: int, msg: str) -> None:
        """Answer now and keep the connection: the request's cycle is a finished stand-in, so the parser
        reads its body and drops it (uvicorn skips the body of a cycle whose response is complete)."""
        self.cycle = _REFUSED  # type: ignore[assignment]
        self.transport.write(_answer(status, msg, close=False, retry_after=RETRY_AFTER_S))
        self.server_state.total_requests += 1
        self._served = True
        self._request_done()
        self.shared.idle[self] = time.monotonic()
        self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive, self.timeout_keep_alive_handler)
        self._hold_after_refusal()

    def _refusal_app(self, status: int, msg: str) -> Any:
        """An ASGI app answering this request's refusal with Retry-After, then holding the connection's reads."""
        body = _error_body(status, msg)
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", b"%d" % len(body)),
            (b"retry-after", b"%d" % RETRY_AFTER_S),
        ]

        async def refuse(scope: Any, receive: Any, send: Any) -> None:
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            self._hold_after_refusal()

        return refuse

    def _hold_after_refusal(self) -> None:
        """Read nothing more from this connection for a random 0.5-1 of the Retry-After: connections refused
        in one burst come back spread out, not as the next burst (a client that honours it is never held).
        What was read already is parsed and answered in order; uvicorn's own pause may resume it sooner."""
        if self.transport.is_closing() or self._held is not None:
            return
        self.transport.pause_reading()
        self._held = self.loop.call_later(RETRY_AFTER_S * random.uniform(0.5, 1.0), self._release)

    def _release(self) -> None:
        self._held = None
        if not self.transport.is_closing() and not self.flow.read_paused:
            self.transport.resume_reading()

    def _evict_idle(self) -> bool:
        """Close the connection idle longest (not this one: it has a request), if it has been idle
        MIN_IDLE_S at least (a keep-alive client between two requests is not idle); False where none is."""
        now = time.monotonic()
        idle = self.shared.idle
        while idle:
            oldest, since = next(iter(idle.items()))
            if now - since < MIN_IDLE_S:
                return False
            del idle[oldest]
            if not oldest.transport.is_closing():
                oldest._close()
                return True
        return False

    def on_message_complete(self) -> None:
        self._complete = True
        self._disarm()
        super().on_message_complete()
