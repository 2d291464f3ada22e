"""The HTTP/1.1 protocol the service runs: uvicorn's httptools protocol with the limits trusted
servers set by default, which uvicorn leaves open.

- Header size: a request whose request line and headers pass ``max_header_bytes`` (16 KiB, h11's
  default) gets a 431 and the connection is closed; nothing more of it is buffered.
- Request deadline: a request must arrive complete (headers and body) within ``request_timeout_s``
  of the connection opening or of its first byte; a slow or silent client gets a 408 and is cut
  off. Idle keep-alive connections close after uvicorn's ``timeout_keep_alive``.
- Connection cap: past ``limit_concurrency`` open connections, a request gets a JSON 503 with
  Retry-After and its connection is closed (file descriptors are what runs out first).

The limits come from uvicorn's Config (``limit_concurrency``) and from BCETUNE_MAX_HEADER_BYTES and
BCETUNE_REQUEST_TIMEOUT (``python -m service`` sets them from its settings for every worker).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import httptools
import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

DEFAULT_MAX_HEADER_BYTES = 16384
DEFAULT_REQUEST_TIMEOUT_S = 10.0

_REASONS = {408: b"Request Timeout", 431: b"Request Header Fields Too Large", 503: b"Service Unavailable"}


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
        self._refused = False
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
        if self.cycle is not None and not self.cycle.response_complete:
            self.cycle.disconnected = True  # the app's receive() now answers http.disconnect
            self.cycle.message_event.set()
            if self.cycle.response_started:
                self.transport.close()
                return
        self._refuse(408, f"the request did not arrive complete within {self.request_timeout_s:g} s")

    def _refuse(self, status: int, msg: str, retry_after: int | None = None) -> None:
        """Answer ``status`` with the service's JSON error and close the connection."""
        self._refused = True
        self._disarm()
        body = orjson.dumps({"detail": [{"loc": [], "msg": msg, "type": f"http_{status}"}]})
        head = [
            b"HTTP/1.1 %d %s\r\n" % (status, _REASONS[status]),
            b"content-type: application/json\r\n",
            b"content-length: %d\r\n" % len(body),
            b"connection: close\r\n",
        ]
        if retry_after is not None:
            head.append(b"retry-after: %d\r\n" % retry_after)
        if not self.transport.is_closing():
            self.transport.write(b"".join(head) + b"\r\n" + body)
            self.transport.close()

    # protocol events ----------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()  # a connection that never sends a request is cut off too

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self.transport.close()  # the service speaks no upgraded protocol
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
            self._pending_bytes += len(data)
            if self._pending_bytes > self.max_header_bytes:
                self._refuse(431, f"request line and headers are over {self.max_header_bytes} bytes")

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._headers_done = False
        self._header_bytes = 0
        self._pending_bytes = 0
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
        cap = self.limit_concurrency
        if cap is not None and (len(self.connections) >= cap or len(self.tasks) >= cap):
            raise _Refuse(503, f"the server is at its limit of {cap} connections; retry shortly")
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._disarm()
        super().on_message_complete()
