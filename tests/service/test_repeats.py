"""service.repeats: a POST /tiling body answered 200 before is answered again from its bytes (the same
bytes as the app's answer, counted and timed under /tiling), refusals are never kept, new tables drop
every kept answer (tests/service/test_service.py's reload test sends one body across three tables), and
the store stays within its bytes."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from service_helpers import GOOD, Server, entry, make_table

from service.metrics import Metrics
from service.repeats import ENTRY_OVERHEAD, RepeatedBodies
from tiling_model.tables import write_table


def metric(text: str, prefix: str) -> float:
    return sum(float(x.rsplit(" ", 1)[1]) for x in text.splitlines() if x.startswith(prefix))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    d = tmp_path_factory.mktemp("tables")
    write_table(make_table([entry("float16", "mean", 1 << 20, GOOD)]), d / "Ascend910B2.json")
    srv = Server(d, "--reload-interval", "0")
    yield srv
    srv.stop()


@pytest.mark.slow  # a real server
def test_a_repeated_body_gets_the_apps_answer_byte_for_byte_counted_under_tiling(server: Server) -> None:
    body = b'{"shape": [1048576], "dtype": "float16", "reduction": "mean"}'
    headers = {"content-type": "application/json"}
    first = httpx.post(server.url + "/tiling", content=body, headers=headers)
    before = httpx.get(server.url + "/metrics").text
    again = [httpx.post(server.url + "/tiling", content=body, headers=headers) for _ in range(3)]
    after = httpx.get(server.url + "/metrics").text
    assert first.status_code == 200 and first.json()["params"] == GOOD
    assert all(r.status_code == 200 and r.content == first.content for r in again)
    assert all(r.headers["content-type"] == "application/json" for r in again)
    repeat = 'bcetune_tiling_source_total{source="repeat"}'
    assert metric(after, repeat) - metric(before, repeat) == 3
    served = 'bcetune_requests_total{endpoint="/tiling",method="POST",status="200"}'
    assert metric(after, served) - metric(before, served) == 3


@pytest.mark.slow
def test_a_refused_body_is_never_kept(server: Server) -> None:
    bad = b'{"shape": [1073741824, 16], "dtype": "float32"}'  # past device memory: 422
    before = httpx.get(server.url + "/metrics").text
    got = [httpx.post(server.url + "/tiling", content=bad, headers={"content-type": "application/json"})
           for _ in range(2)]  # fmt: skip
    after = httpx.get(server.url + "/metrics").text
    assert [r.status_code for r in got] == [422, 422] and got[0].content == got[1].content
    repeat = 'bcetune_tiling_source_total{source="repeat"}'
    assert metric(after, repeat) == metric(before, repeat)


def _answering(size: int) -> Any:
    """An ASGI app answering every request 200 with ``size`` bytes (counting its calls)."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await receive()
        app.calls += 1  # type: ignore[attr-defined]
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"x" * size})

    app.calls = 0  # type: ignore[attr-defined]
    return app


def _post(mw: RepeatedBodies, body: bytes, content_type: bytes = b"application/json") -> bytes:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    headers = [(b"content-type", content_type), (b"content-length", b"%d" % len(body))]
    scope = {"type": "http", "method": "POST", "path": "/tiling", "headers": headers}
    asyncio.run(mw(scope, receive, send))
    return b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


def test_the_store_stays_within_its_bytes_and_keys_by_content_type_and_tables() -> None:
    app = _answering(1000)
    store = SimpleNamespace(snapshot=object())
    mw = RepeatedBodies(app, store, Metrics(), max_body=65536, capacity_bytes=20_000)  # type: ignore[arg-type]
    for i in range(100):
        _post(mw, b'{"shape": [%d]}' % i)
    assert app.calls == 100 and mw.bytes <= 20_000 and 0 < len(mw) <= 20_000 // (1000 + ENTRY_OVERHEAD)
    _post(mw, b'{"shape": [99]}')
    assert app.calls == 100  # the latest is kept
    _post(mw, b'{"shape": [99]}', b"text/plain")
    assert app.calls == 101  # another Content-Type is another request
    store.snapshot = object()  # new tables
    _post(mw, b'{"shape": [99]}')
    assert app.calls == 102 and len(mw) == 1
