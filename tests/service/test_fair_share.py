"""The scheduler in the running service, over real HTTP: a client past its share of expensive requests
gets a 429 with Retry-After while another client is served, pictures of clients that left are not
drawn, the serving process never loads matplotlib, idle connections make way for active ones, and
past the in-progress cap a request is refused at once."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import httpx
import pytest
from service_helpers import GOOD, Server, _free_port, _wait_for, entry, make_table

from tiling_model.tables import write_table

pytestmark = pytest.mark.slow  # real servers sharing work between clients


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("tables")
    write_table(make_table([entry("float16", "mean", 1 << 20, GOOD)]), d / "Ascend910B2.json")
    return d


@pytest.fixture(scope="module")
def server(tables: Path) -> Iterator[Server]:
    srv = Server(tables, "--reload-interval", "0", "--per-client", "2")
    yield srv
    srv.stop()


def metric(server: Server, name: str) -> float:
    for line in httpx.get(server.url + "/metrics").text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def picture(i: int) -> dict:
    return {"shape": [4096 + i, 333], "dtype": "float32"}  # distinct: nothing cached


async def _pictures(url: str, count: int, local: str = "127.0.0.1") -> list[httpx.Response]:
    transport = httpx.AsyncHTTPTransport(local_address=local)
    async with httpx.AsyncClient(transport=transport, timeout=60) as c:
        return await asyncio.gather(
            *(c.post(url + "/tiling/plot/landscape", json=picture(i + 1000 * (local == "127.0.0.2")))
              for i in range(count))
        )  # fmt: skip


def test_a_client_past_its_share_gets_a_429_while_another_client_is_served(server: Server) -> None:
    async def both() -> tuple[list[httpx.Response], list[httpx.Response]]:
        greedy = asyncio.create_task(_pictures(server.url, 6))
        await asyncio.sleep(0.05)
        other = await _pictures(server.url, 1, local="127.0.0.2")
        return await greedy, other

    greedy, other = asyncio.run(both())
    codes = sorted(r.status_code for r in greedy)
    assert codes.count(200) >= 2 and codes.count(429) >= 1 and set(codes) <= {200, 429}, codes
    refused = next(r for r in greedy if r.status_code == 429)
    assert refused.headers["retry-after"] == "1" and "in flight already" in refused.json()["detail"][0]["msg"]
    assert other[0].status_code == 200 and other[0].headers["content-type"] == "image/svg+xml"


def test_the_serving_process_never_loads_matplotlib(server: Server) -> None:
    assert asyncio.run(_pictures(server.url, 1))[0].status_code == 200
    maps = Path(f"/proc/{server.proc.pid}/maps").read_text()
    assert "matplotlib" not in maps and "ft2font" not in maps


def test_pictures_of_clients_that_left_are_not_drawn(tables: Path) -> None:
    srv = Server(tables, "--reload-interval", "0", "--per-client", "50", "--heavy-workers", "1")
    try:
        _wait_for(lambda: metric(srv, 'bcetune_scheduler_jobs_total{outcome="done"}') >= 0)
        for i in range(12):  # sent and given up on at once, as a client that navigates away
            s = socket.create_connection(("127.0.0.1", srv.port))
            body = b'{"shape":[%d,777],"dtype":"float16"}' % (50_000 + i)
            s.sendall(b"POST /tiling/plot/landscape HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\n\r\n%s" % (len(body), body))  # fmt: skip
            s.close()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            done = metric(srv, 'bcetune_scheduler_jobs_total{outcome="done"}')
            cancelled = metric(srv, 'bcetune_scheduler_jobs_total{outcome="cancelled"}')
            if done + cancelled >= 12:
                break
            time.sleep(0.2)
        assert cancelled >= 6 and done + cancelled >= 12, (done, cancelled)  # at most a few were under way
    finally:
        srv.stop()


def test_idle_connections_make_way_for_a_request_at_the_connection_cap(tables: Path) -> None:
    srv = Server(tables, "--reload-interval", "0", "--max-connections", "30")
    held = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(40)]
    try:
        time.sleep(1.2)  # idle a second at least: a keep-alive client between two requests is not closed
        for _ in range(20):  # every request served, each by closing an idle connection
            r = httpx.post(srv.url + "/tiling", json={"shape": [4096], "dtype": "float32"})
            assert r.status_code == 200, r.text
        closed = 0
        for h in held:
            h.settimeout(0.01)
            try:
                closed += h.recv(1) == b""
            except TimeoutError:
                pass
        # as many as it took to get under the cap (40 held + the request's own, cap 30), no more
        assert 11 <= closed <= 13, closed
    finally:
        for h in held:
            h.close()
        srv.stop()


def test_past_the_in_progress_cap_a_request_is_refused_at_once_with_retry_after(tables: Path) -> None:
    srv = Server(tables, "--reload-interval", "0", "--max-active", "4", "--per-client", "64")

    async def flood() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=64)) as c:
            bodies = [{"requests": [{"shape": [10_000 + 256 * i + k], "dtype": "float32"} for k in range(256)]}
                      for i in range(24)]  # fmt: skip
            return await asyncio.gather(*(c.post(srv.url + "/tiling/batch", json=b) for b in bodies))

    try:
        got = asyncio.run(flood())
    finally:
        srv.stop()
    codes = [r.status_code for r in got]
    assert set(codes) <= {200, 503} and codes.count(503) >= 1 and codes.count(200) >= 4, codes
    shed = next(r for r in got if r.status_code == 503)
    assert shed.headers["retry-after"] == "1" and "requests in progress" in shed.json()["detail"][0]["msg"]


def _slow_body(port: int) -> socket.socket:
    """A connection whose request's headers came and whose body never does: one request in flight (its
    task waits for the body) until the request deadline."""
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"POST /tiling HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 40\r\n\r\n")
    time.sleep(0.2)
    return s


def test_a_request_past_the_in_flight_bound_is_refused_on_its_kept_connection_and_its_reads_held(
    tables: Path,
) -> None:
    """Past --max-active requests in flight (one here, held by a body that never comes), a request gets its
    503 with Retry-After at once, on the kept connection: its body is read (the next request parses), and
    nothing more is read for part of the Retry-After (half of it at least)."""
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "service", "--port", str(port), "--tables", str(tables),
                             "--reload-interval", "0", "--max-active", "1"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_for(lambda: _up(url, proc), timeout=30)
        slow = _slow_body(port)
        r = httpx.post(url + "/tiling", json={"shape": [1024], "dtype": "float32"})
        assert r.status_code == 503 and r.headers["retry-after"] == "1" and "connection" not in r.headers
        assert "1 requests in progress" in r.json()["detail"][0]["msg"]

        body = b'{"shape": [1024], "dtype": "float32"}'
        post = b"POST /tiling HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.settimeout(10)
            sent = time.monotonic()
            f = s.makefile("rb")
            s.sendall(post % (len(body), body))
            first = _read_answer(f)
            s.sendall(post % (len(body), body))  # at once, ignoring the Retry-After
            second = _read_answer(f)
            waited = time.monotonic() - sent
        for answer in (first, second):
            head = answer.split(b"\r\n\r\n", 1)[0].lower()
            assert head.startswith(b"http/1.1 503") and b"retry-after: 1" in head and b"connection: close" not in head
        # held for a random part of the Retry-After, half of it at least
        assert waited >= 0.45, f"the second request was read {waited:.2f} s after the first refusal"
        slow.close()
        time.sleep(0.3)  # the slow request gone: in flight 0, admitted again
        assert httpx.post(url + "/tiling", json={"shape": [1024], "dtype": "float32"}).status_code == 200
    finally:
        proc.terminate()
        err = proc.communicate(timeout=10)[1]
    assert "Traceback" not in err, err


def _up(url: str, proc: subprocess.Popen) -> bool:
    assert proc.poll() is None, "service exited"
    try:
        return httpx.get(url + "/healthz", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def test_a_shed_request_pipelined_behind_an_answer_in_progress_is_refused_in_its_turn(tables: Path) -> None:
    """Past the in-progress cap, a request pipelined behind one being answered gets its 503 after that
    answer, on the kept connection."""
    srv = Server(tables, "--reload-interval", "0", "--max-active", "1")
    batch = b'{"requests": [%s]}' % b",".join(b'{"shape": [%d], "dtype": "float32"}' % (50_000 + k) for k in range(256))
    one = b'{"shape": [1024], "dtype": "float32"}'
    post = b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
    try:
        with socket.create_connection(("127.0.0.1", srv.port)) as s:
            s.settimeout(30)
            s.sendall(post % (b"/tiling/batch", len(batch), batch) + post % (b"/tiling", len(one), one))
            f = s.makefile("rb")
            first, second = _read_answer(f), _read_answer(f)
            assert first.startswith(b"HTTP/1.1 200") and b'"responses"' in first, first[:300]
            head = second.split(b"\r\n\r\n", 1)[0].lower()
            assert head.startswith(b"http/1.1 503") and b"retry-after: 1" in head and b"connection: close" not in head
            assert b"1 requests in progress" in second
    finally:
        srv.stop()


def test_slow_expensive_requests_in_progress_do_not_shed_tiling(tables: Path) -> None:
    """Pictures in progress for seconds are the scheduler's to admit: /tiling beside them is answered (with
    a drain-rate estimate, a few slow answers a second with pictures waiting read as seconds of backlog,
    and every /tiling was refused; the shedding now judges only what requests waited to start)."""
    srv = Server(tables, "--reload-interval", "0", "--per-client", "64")

    async def run() -> tuple[list[int], list[int]]:
        async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=64)) as c:
            until = time.monotonic() + 7

            async def pictures(k: int) -> list[int]:
                codes, i = [], 0
                while time.monotonic() < until:
                    i += 1
                    r = await c.post(srv.url + "/tiling/plot/landscape", json=picture(10_000 * k + i))
                    codes.append(r.status_code)
                return codes

            async def tiling() -> list[int]:
                codes = []
                for i in range(12):  # one every half second while pictures are answered with others waiting
                    await asyncio.sleep(0.5)
                    r = await c.post(srv.url + "/tiling", json={"shape": [70_000 + i], "dtype": "float32"})
                    codes.append(r.status_code)
                return codes

            *drawn, answered = await asyncio.gather(*(pictures(k) for k in range(8)), tiling())
            return [code for codes in drawn for code in codes], answered

    try:
        drawn, answered = asyncio.run(run())
    finally:
        srv.stop()
    assert drawn.count(200) >= 8, drawn
    assert answered == [200] * 12, (answered, drawn)


def test_a_shed_request_whose_body_never_comes_gets_one_answer_then_the_connection_closes(tables: Path) -> None:
    """Refused on its headers, a request's body is still to come: past the request deadline the connection
    closes, with no 408 after the 503 (one answer a request)."""
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "service", "--port", str(port), "--tables", str(tables),
                             "--reload-interval", "0", "--max-active", "1", "--request-timeout", "2"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        _wait_for(lambda: _up(f"http://127.0.0.1:{port}", proc), timeout=30)
        slow = _slow_body(port)  # the one request in flight
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.settimeout(10)
            s.sendall(b"POST /tiling HTTP/1.1\r\nHost: x\r\nContent-Length: 40\r\n\r\n")  # the body never sent
            f = s.makefile("rb")
            first = _read_answer(f)
            assert first.startswith(b"HTTP/1.1 503") and b"retry-after: 1" in first.lower()
            assert f.read() == b"", "a second answer after the refusal"  # closed at the deadline, nothing more
        slow.close()
    finally:
        proc.terminate()
        err = proc.communicate(timeout=10)[1]
    assert "Traceback" not in err, err


def _read_answer(f: BinaryIO) -> bytes:
    """One whole response from a socket's file: its head, then its Content-Length of body."""
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        line = f.readline()
        assert line, f"connection closed after {head!r}"
        head += line
    length = int(next(x.split(b":")[1] for x in head.lower().split(b"\r\n") if x.startswith(b"content-length")))
    body = f.read(length)
    assert len(body) == length, "connection closed mid-body"
    return head + body


def test_at_the_connection_cap_an_established_client_keeps_its_connection(tables: Path) -> None:
    """A flood of fresh connections (none idle a second yet) refuses new clients, not one already served."""
    srv = Server(tables, "--reload-interval", "0", "--max-connections", "5")
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    held: list[socket.socket] = []

    def closed_by_server(s: socket.socket) -> bool:
        s.settimeout(0.5)
        try:
            return s.recv(1) == b""
        except TimeoutError:
            return False

    def answer(s: socket.socket) -> bytes:
        """One whole response (its head and its Content-Length of body), however it arrives."""
        data = b""
        while b"\r\n\r\n" not in data:
            data += s.recv(65536)
        head, _, body = data.partition(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
        )
        while len(body) < length:
            body += s.recv(65536)
        return head

    try:
        client = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
        client.sendall(request)
        assert answer(client).startswith(b"HTTP/1.1 200")
        held = [socket.create_connection(("127.0.0.1", srv.port), timeout=10) for _ in range(8)]
        time.sleep(0.2)  # accepted, and idle for less than a second: not to be closed for another's request
        client.sendall(request)
        assert answer(client).startswith(b"HTTP/1.1 200")
        newcomer = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
        newcomer.sendall(request)
        refused = answer(newcomer)
        if not refused.startswith(b"HTTP/1.1 503"):  # only where a held connection had turned a second idle
            assert any(closed_by_server(h) for h in held), refused  # and was closed to make way
        else:
            assert b"retry-after" in refused.lower()
        client.close()
        newcomer.close()
    finally:
        for h in held:
            h.close()
        srv.stop()
