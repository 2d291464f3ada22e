"""Load benchmark of the service with wrk, side by side with a trivial pydantic-validated POST on
the same server and worker count:

- **cold**: every request distinct (random shapes of 1e3..1e9 elements, the tuned range, and random
  variants), so each one is resolved: table lookup, re-fit to the size, validation, response;
- **warm**: 8 shapes repeated, so after their first answer it measures the answer cache;
- cold throughput at 1, 8 and 32 connections (does it fall as connections rise?);
- error checks at 64 and 256 connections (warm mix);
- hostile clients: a silent connection, a header flood, connections past the cap (what happens, how fast).

Run: ``make bench-service``. Prints what it measured in this run; no thresholds are asserted
(this machine is shared and noisy), but the targets are printed beside the figures.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from tiling_model import every_variant

SHAPES = [
    ([1024, 1024], "float16", "mean"),
    ([4096, 4096], "float32", "none"),
    ([333, 777], "bfloat16", "sum"),
    ([1 << 20], "int32", "none"),
    ([8, 128, 128], "float16", "none"),
    ([100003], "float32", "mean"),
    ([64, 1000], "int16", "none"),
    ([2, 3, 5, 7, 11, 13], "float32", "sum"),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(args: list[str], env: dict[str, str] | None = None) -> tuple[subprocess.Popen, str]:
    """Start ``python -m service`` on a free port and wait until it answers."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "service", "--port", str(port), "--log-level", "warning", *args], env=env
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return server, url
        except httpx.TransportError:
            time.sleep(0.1)
    server.terminate()
    raise RuntimeError("service did not come up")


THREADS = 2


def random_shape(rng: random.Random) -> list[int]:
    """A shape of 1e3..1e9 elements (log-uniform), split into 1..4 dims."""
    n = int(math.exp(rng.uniform(math.log(1e3), math.log(1e9))))
    dims = []
    for _ in range(rng.randint(0, 3)):
        d = rng.randint(2, 64)
        if n // d < 2:
            break
        dims.append(d)
        n //= d
    return [*dims, n]


MAX_CLASSES = 1 << 16  # the largest last dim of a cold request with a per-class pos_weight


def cold_bodies(count: int, seed: int = 2026) -> list[str]:
    """``count`` distinct request bodies: random shapes in the tuned range and random variants."""
    rng = random.Random(seed)
    variants = every_variant()
    bodies: dict[str, None] = {}  # insertion-ordered set: the same seed gives the same sequence
    while len(bodies) < count:
        v = rng.choice(variants)
        shape = random_shape(rng)
        if v.pos_weight == "last_dim" and shape[-1] > MAX_CLASSES:
            continue  # a per-class pos_weight of millions of classes needs more workspace than a device has (a 422)
        body = {"shape": shape, "dtype": v.dtype, "reduction": v.reduction, "weight": v.weight}
        body |= {"pos_weight": v.pos_weight, "wrt": v.wrt}
        bodies[json.dumps(body)] = None
    return list(bodies)


def lua_script(bodies: list[str]) -> str:
    """wrk script: each thread walks its own slice of ``bodies`` (so the cold mix never repeats
    within a run shorter than the list)."""
    items = ",\n".join("  [[" + b + "]]" for b in bodies)
    return f"""
local bodies = {{
{items}
}}
local threads = 0
function setup(thread)
  thread:set("tid", threads)
  threads = threads + 1
end
function init(args)
  i = (tid or 0) * math.floor(#bodies / {THREADS})
end
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
request = function()
  i = i % #bodies + 1
  return wrk.format(nil, nil, nil, bodies[i])
end
"""


def parse(out: str) -> dict[str, float]:
    def num(pattern: str) -> float | None:
        m = re.search(pattern, out)
        return float(m.group(1)) if m else None

    def latency(label: str) -> float | None:
        m = re.search(rf"{label}\s+([\d.]+)(us|ms|s)", out)
        if not m:
            return None
        scale = {"us": 1e-3, "ms": 1.0, "s": 1e3}[m.group(2)]
        return float(m.group(1)) * scale

    socket_errors = timeouts = 0
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    if m:
        socket_errors = sum(int(x) for x in m.groups()[:3])
        timeouts = int(m.group(4))
    non2xx = num(r"Non-2xx or 3xx responses: (\d+)") or 0
    errors = socket_errors + timeouts + non2xx
    return {
        "timeouts": timeouts,
        "non2xx": non2xx,
        "rps": num(r"Requests/sec:\s+([\d.]+)") or 0.0,
        "p50_ms": latency("50%"),
        "p99_ms": latency("99%"),
        "requests": num(r"(\d+) requests in") or 0,
        "errors": errors,
    }


def wrk(url: str, script: Path, connections: int, seconds: int) -> dict[str, float]:
    out = subprocess.run(
        [
            "wrk",
            f"-t{min(THREADS, connections)}",
            f"-c{connections}",
            f"-d{seconds}s",
            "--latency",
            "-s",
            str(script),
            url,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return parse(out)


def answer_each(url: str, bodies: list[str]) -> None:
    """POST each body to /tiling once; any answer but 200 stops the benchmark with its text."""
    for b in bodies:
        r = httpx.post(url + "/tiling", content=b, headers={"content-type": "application/json"})
        if r.status_code != 200:
            raise RuntimeError(f"{b} -> {r.status_code}: {r.text}")


def run(url: str, path: str, bodies: list[str], conns: int, seconds: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "mix.lua"
        script.write_text(lua_script(bodies))
        return wrk(url + path, script, conns, seconds)


def _read_all(s: socket.socket) -> bytes:
    out = b""
    try:
        while chunk := s.recv(65536):
            out += chunk
    except OSError:
        pass
    return out


def status_line(answer: bytes) -> str:
    return answer.split(b"\r\n")[0].decode() or "(connection closed without an answer)"


def rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS"))) / 1024


def hostile_outcomes(url: str, pid: int, max_connections: int) -> list[str]:
    """What a slow client, a header flood and a connection flood get, measured against the running server."""
    host, port = url.removeprefix("http://").split(":")
    out = []

    def connect() -> socket.socket:
        c = socket.create_connection((host, int(port)))
        c.settimeout(60)
        return c

    c, start = connect(), time.monotonic()
    c.sendall(b"POST /tiling HTTP/1.1\r\nHost: x\r\n")  # headers that never finish
    answer = _read_all(c)
    out.append(f"slow client (headers never finish): {status_line(answer)} after {time.monotonic() - start:.1f} s")
    before, sent = rss_mib(pid), 0
    c = connect()
    try:
        c.sendall(b"POST /tiling HTTP/1.1\r\nHost: x\r\n")
        while sent < 1 << 30:  # up to 1 GiB of headers
            c.sendall(b"X-Junk: " + b"a" * 65536 + b"\r\n")
            sent += 65546
    except OSError:
        pass
    answer = _read_all(c)
    out.append(
        f"header flood: {status_line(answer)} after {sent / 2**20:.1f} MiB sent; "
        f"server RSS {before:.0f} -> {rss_mib(pid):.0f} MiB"
    )
    held = []
    try:
        for _ in range(max_connections + 5):
            held.append(connect())
        time.sleep(0.3)
        c = connect()
        c.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = _read_all(c)
        status = status_line(answer)
        retry = "with Retry-After" if b"retry-after" in answer else "without Retry-After"
        out.append(f"{len(held)} idle connections open (cap {max_connections}), one more request: {status} {retry}")
    finally:
        for h in held:
            h.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--cold-bodies", type=int, default=60000, help="distinct requests in the cold mix")
    ap.add_argument("--max-connections", type=int, default=300, help="the server's connection cap in this run")
    a = ap.parse_args()
    cold = cold_bodies(a.cold_bodies)
    warm = [json.dumps({"shape": s, "dtype": d, "reduction": r}) for s, d, r in SHAPES]
    server, url = start_server(
        ["--workers", str(a.workers), "--max-connections", str(a.max_connections)],
        dict(os.environ, BCETUNE_BENCH_ENDPOINTS="1"),
    )
    try:
        answer_each(url, cold[:20])  # the cold mix is valid input (a 4xx would be measured as an error)
        cold = cold[20:]
        print(
            f"wrk -t{THREADS}, {a.seconds} s per run, {a.workers} uvicorn worker(s), server and wrk on one host; "
            f"cold mix: {len(cold)} distinct requests"
        )
        answer_each(url, warm)  # every warm request answered once: from here on the warm mix is cache hits
        rows = []
        trivial_warm = run(url, "/bench/trivial", warm, 8, a.seconds)
        rows.append(("POST /bench/trivial (warm mix)", 8, trivial_warm))
        warm_r = run(url, "/tiling", warm, 8, a.seconds)
        rows.append(("POST /tiling warm (cache)", 8, warm_r))
        trivial = run(url, "/bench/trivial", cold, 8, a.seconds)
        rows.append(("POST /bench/trivial (cold mix)", 8, trivial))
        cold_r = run(url, "/tiling", cold, 8, a.seconds)
        rows.append(("POST /tiling cold", 8, cold_r))
        sent = int(cold_r["requests"])
        for conns in (1, 32):  # fresh bodies for each run: none of them answered before
            rows.append(("POST /tiling cold", conns, r := run(url, "/tiling", cold[sent:], conns, a.seconds)))
            sent += int(r["requests"])
        repeated = sent > len(cold)
        for conns in (64, 256):
            rows.append(("POST /tiling warm (cache)", conns, run(url, "/tiling", warm, conns, a.seconds)))
        print(f"{'endpoint':<32}{'conns':>6}{'req/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'errors':>8}")
        for name, conns, r in rows:
            print(f"{name:<32}{conns:>6}{r['rps']:>10.0f}{r['p50_ms']:>9.2f}{r['p99_ms']:>9.2f}{r['errors']:>8.0f}")
        if repeated:
            print(f"note: the cold runs sent {sent} requests, more than {len(cold)} bodies: raise --cold-bodies")
        ratio = cold_r["rps"] / trivial["rps"] if trivial["rps"] else 0.0
        warm_ratio = warm_r["rps"] / trivial_warm["rps"] if trivial_warm["rps"] else 0.0
        print(
            f"cold /tiling = {100 * ratio:.1f}% of the trivial endpoint's throughput, p99 {cold_r['p99_ms']:.2f} ms; "
            f"warm (cache hits) = {100 * warm_ratio:.1f}%, p99 {warm_r['p99_ms']:.2f} ms; "
            f"errors at 64/256 connections: {rows[6][2]['errors']:.0f}/{rows[7][2]['errors']:.0f}"
        )
        for name, conns, r in rows:
            if r["errors"]:
                print(
                    f"  {name} at {conns} connections: {r['non2xx']:.0f} non-2xx (503: server at its in-flight cap), "
                    f"{r['timeouts']:.0f} wrk timeouts (no answer within 2 s), "
                    f"{r['errors'] - r['non2xx'] - r['timeouts']:.0f} socket errors"
                )
        if a.workers == 1:
            for line in hostile_outcomes(url, server.pid, a.max_connections):
                print(line)
    finally:
        server.terminate()
        server.wait(timeout=10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
