"""``POST /tiling`` bodies seen before, answered again from their bytes.

A client asking for the same tiling again (a training loop's every step, the explorer's reload) sends the
same bytes. Their answer was encoded once (``service.answers``); this middleware keeps it beside the
request's bytes, so a repeat costs one dictionary lookup: no routing, no dependency injection, no
pydantic parse, no query key. It sits inside the admission middleware (a repeat still counts as a cheap
request in flight, what the expensive requests' share yields to) and the metrics (counted and timed under
``/tiling``, its source ``repeat``); behind the protocol's shedding and per-address limits, like every
request. Only 200s are kept, keyed by the body and its Content-Type; the whole store is dropped when the
tables change; it is bounded in bytes (each entry: its body, its answer and their overhead).
"""

from __future__ import annotations

from collections import OrderedDict
from types import SimpleNamespace
from typing import Any

from service.metrics import Metrics
from service.store import TableStore

#: What an entry costs beyond its two byte strings: the dict slot, the tuple key, the bytes objects' headers.
ENTRY_OVERHEAD = 240
PATH = "/tiling"
#: scope["route"] of a repeat: the route template the metrics middleware reads (routing never runs)
ROUTE = SimpleNamespace(path=PATH)


class RepeatedBodies:
    """Pure ASGI middleware: a POST /tiling whose Content-Type and body bytes were answered 200 under the
    tables serving now gets that answer again, without reaching the app."""

    def __init__(self, app: Any, store: TableStore, metrics: Metrics, max_body: int,
                 capacity_bytes: int = 8 << 20) -> None:  # fmt: skip
        self.app = app
        self.store = store
        self.metrics = metrics
        self.max_body = max_body
        self.capacity_bytes = capacity_bytes
        self.bytes = 0
        self._answers: OrderedDict[tuple[bytes, bytes], bytes] = OrderedDict()
        self._snapshot: object = None

    def __len__(self) -> int:
        return len(self._answers)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != PATH or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        content_type, length = b"", -1
        for name, value in scope["headers"]:
            if name == b"content-type":
                content_type = value
            elif name == b"content-length":
                length = int(value) if value.isdigit() else -1
        if not 0 <= length <= self.max_body:  # chunked or too long: the app's limits answer it
            await self.app(scope, receive, send)
            return
        messages, body = [], b""
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break  # the client left: the app sees it as it would have
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        if self.store.snapshot is not self._snapshot:  # new tables: every kept answer may be stale
            self._answers.clear()
            self.bytes, self._snapshot = 0, self.store.snapshot
        key = (content_type, body)
        answer = self._answers.get(key)
        if answer is not None:
            self._answers.move_to_end(key)
            scope["route"] = ROUTE  # what the metrics label the answer with, as routing would
            self.metrics.sources.labels("repeat").inc()
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", b"%d" % len(answer))]})  # fmt: skip
            await send({"type": "http.response.body", "body": answer})
            return
        await self.app(scope, _replay(messages, receive), self._keeping(send, key, self._snapshot))

    def _keeping(self, send: Any, key: tuple[bytes, bytes], snapshot: object) -> Any:
        """``send``, keeping a whole 200 answer's bytes for ``key`` (answered under ``snapshot``)."""
        state: dict[str, Any] = {"ok": False}

        async def keeping_send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                state["ok"] = message["status"] == 200
            elif state["ok"] and message["type"] == "http.response.body" and not message.get("more_body", False):
                if self._snapshot is snapshot:
                    self._keep(key, bytes(message.get("body", b"")))
            await send(message)

        return keeping_send

    def _keep(self, key: tuple[bytes, bytes], answer: bytes) -> None:
        size = len(key[0]) + len(key[1]) + len(answer) + ENTRY_OVERHEAD
        if size > self.capacity_bytes // 8 or key in self._answers:
            return
        self._answers[key] = answer
        self.bytes += size
        while self.bytes > self.capacity_bytes:
            (ct, b), old = self._answers.popitem(last=False)
            self.bytes -= len(ct) + len(b) + len(old) + ENTRY_OVERHEAD


def _replay(messages: list[dict[str, Any]], receive: Any) -> Any:
    """A receive that gives the messages already read, then the client's own."""
    pending = list(messages)

    async def replay() -> dict[str, Any]:
        if pending:
            return pending.pop(0)
        return await receive()

    return replay
