"""The production deployment: the service behind Debian's nginx with deploy/nginx/bcetune.conf, as an
operator runs it (run_proxy.py includes the shipped file unchanged but for its ports). The real nginx,
real HTTP: answers pass through byte for byte, the client's address is the proxy's word (a client's own
X-Forwarded-For is replaced), an address past its requests in progress gets 429 with Retry-After, its
expensive requests past their burst wait their turn, a slow client is cut off by nginx, and the attack
benchmark runs through it and against the bare service with no 5xx."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from service_helpers import GOOD, Server, _free_port, entry, make_table

from tiling_model.tables import write_table

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "deploy" / "nginx"))
import run_proxy  # noqa: E402

pytestmark = [
    pytest.mark.proxy,
    pytest.mark.skipif(run_proxy.nginx_binary() is None, reason="no nginx (Debian nginx-light; CI=true installs it)"),
]


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("tables")
    write_table(make_table([entry("float16", "mean", 1 << 20, GOOD)]), d / "Ascend910B2.json")
    return d


class Proxied:
    def __init__(self, server: Server, proxy: subprocess.Popen[bytes], port: int) -> None:
        self.server, self.proxy, self.port = server, proxy, port
        self.url = f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def proxied(tables: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxied]:
    srv = Server(tables, "--reload-interval", "0", "--per-client", "2", "--forwarded-allow-ips", "127.0.0.1")
    port = _free_port()
    proxy = run_proxy.start(port, srv.port, tmp_path_factory.mktemp("nginx"))
    yield Proxied(srv, proxy, port)
    proxy.terminate()
    proxy.wait(timeout=10)
    srv.stop()


def test_answers_pass_through_byte_for_byte(proxied: Proxied) -> None:
    body = {"shape": [1024, 1024], "dtype": "float16", "reduction": "mean"}
    through = httpx.post(proxied.url + "/tiling", json=body)
    direct = httpx.post(proxied.server.url + "/tiling", json=body)
    assert through.status_code == 200 and through.content == direct.content
    bad = {"shape": [1 << 30, 16], "dtype": "float32"}  # past device memory
    refused = httpx.post(proxied.url + "/tiling", json=bad)
    assert (
        refused.status_code == 422 and refused.content == httpx.post(proxied.server.url + "/tiling", json=bad).content
    )


async def _pictures(url: str, local: str, forwarded: list[str]) -> list[int]:
    transport = httpx.AsyncHTTPTransport(local_address=local)
    async with httpx.AsyncClient(transport=transport, timeout=60) as c:
        got = await asyncio.gather(
            *(c.post(url + "/tiling/plot/ub", json={"shape": [7000 + i, 13 + len(local)], "dtype": "float32"},
                     headers={"x-forwarded-for": f}) for i, f in enumerate(forwarded))
        )  # fmt: skip
    return [r.status_code for r in got]


def test_a_clients_own_forwarded_header_is_replaced_by_its_address(proxied: Proxied) -> None:
    """Six pictures at once, each naming another client: through the proxy they are one client (its socket
    address, which nginx forwards in place of theirs), past its share of 2; two real addresses are two."""
    spoofed = asyncio.run(_pictures(proxied.url, "127.0.0.1", [f"10.1.1.{i}" for i in range(6)]))
    assert spoofed.count(429) >= 3, spoofed

    async def two() -> list[list[int]]:
        return list(await asyncio.gather(_pictures(proxied.url, "127.0.0.1", ["a", "b"]),
                                         _pictures(proxied.url, "127.0.0.2", ["c", "d"])))  # fmt: skip

    assert asyncio.run(two()) == [[200, 200], [200, 200]]


def test_an_address_past_its_requests_in_progress_gets_the_proxys_429_with_retry_after(proxied: Proxied) -> None:
    """limit_conn 128: 128 requests whose bodies are half sent are in progress at nginx (reading them);
    the address's 129th gets nginx's 429 at once, another address is still answered."""
    held = []
    try:
        for _ in range(128):
            s = socket.create_connection(("127.0.0.1", proxied.port), source_address=("127.0.0.4", 0))
            s.sendall(b"POST /tiling HTTP/1.1\r\nHost: x\r\nContent-Length: 60\r\n\r\n{")
            held.append(s)
        time.sleep(0.3)  # every one of them read by nginx
        transport = httpx.HTTPTransport(local_address="127.0.0.4")
        with httpx.Client(transport=transport, timeout=10) as c:
            refused = c.post(proxied.url + "/tiling", json={"shape": [4096], "dtype": "float16"})
        assert refused.status_code == 429, refused.text
        assert refused.headers["retry-after"] == "1" and refused.json()["detail"][0]["type"] == "http_429"
        assert httpx.post(proxied.url + "/tiling", json={"shape": [4096], "dtype": "float16"}).status_code == 200
    finally:
        for s in held:
            s.close()


def test_an_addresss_expensive_requests_past_its_burst_wait_their_turn_instead_of_being_refused(
    proxied: Proxied,
) -> None:
    """limit_req 20 r/s, 40 at once, then delayed (not nodelay): 70 one-item batches sent back to back on one
    connection are all answered 200, the 30 past the burst held to the rate (>= 1.5 s in all; a refusal at
    once would let a client that ignores it spin on the CPU the service needs)."""
    transport = httpx.HTTPTransport(local_address="127.0.0.3")
    codes, start = [], time.monotonic()
    with httpx.Client(transport=transport, timeout=30) as c:
        for i in range(70):
            r = c.post(proxied.url + "/tiling/batch", json={"requests": [{"shape": [5000 + i], "dtype": "float32"}]})
            codes.append(r.status_code)
    took = time.monotonic() - start
    assert codes == [200] * 70, codes
    assert took >= 1.4, took  # (70 - 40) / 20 r/s, less the bucket's draining while the first 40 went


def test_a_client_trickling_its_headers_is_cut_off_by_nginx_and_never_reaches_the_service(proxied: Proxied) -> None:
    before = _tiling_requests(proxied)
    with socket.create_connection(("127.0.0.1", proxied.port)) as s:
        s.settimeout(20)
        start = time.monotonic()
        s.sendall(b"POST /tiling HTTP/1.1\r\nHost: x\r\n")
        try:
            while time.monotonic() - start < 15:
                s.sendall(b"X-a: b\r\n")  # one header a second: slowloris
                time.sleep(1.0)
            closed_after = float("inf")
        except (BrokenPipeError, ConnectionResetError):
            closed_after = time.monotonic() - start
    assert closed_after < 13, closed_after  # client_header_timeout 10s
    assert _tiling_requests(proxied) == before  # the service never saw it


def _tiling_requests(proxied: Proxied) -> float:
    lines = httpx.get(proxied.server.url + "/metrics").text.splitlines()
    return sum(float(x.rsplit(" ", 1)[1]) for x in lines if x.startswith('bcetune_requests_total{endpoint="/tiling",'))


@pytest.mark.parametrize("through_proxy", [False, True], ids=["bare", "nginx"])
def test_the_attack_benchmark_runs_with_no_5xx(through_proxy: bool, tmp_path: Path) -> None:
    """Two attacker rows of benchmarks/service_attack.py (refused batches, spoofed pictures), short: the
    figures are the benchmark's to report; here, what must hold on any machine: no 5xx to the victim,
    none but 503 with Retry-After to the attacker, the server's memory bounded."""
    if shutil.which("wrk") is None:
        pytest.skip("no wrk (Debian wrk; CI=true installs it)")
    out = tmp_path / "rows.json"
    args = [sys.executable, str(ROOT / "benchmarks" / "service_attack.py"), "--seconds", "2", "--only",
            "bad-first,spoofed", "--mix", "distinct", "--json", str(out)]  # fmt: skip
    args += ["--proxy"] if through_proxy else []
    run = subprocess.run(args, capture_output=True, text=True, timeout=300, cwd=ROOT / "benchmarks")
    assert run.returncode == 0, run.stderr[-3000:]
    rows = json.loads(out.read_text())
    assert [r["attacker"] for r in rows] == ["bad-first", "spoofed"]
    for r in rows:
        assert r["non2xx"] == 0 and r["served"] > 0, r
        assert not [k for k in r["attacker_saw"] if k[:1] == "5" and k != "503"], r
        assert r["rss_mib"] < 600, r
