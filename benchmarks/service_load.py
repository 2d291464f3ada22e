"""Load benchmark of the service with wrk: POST /tiling on a mix of shapes, side by side with a
trivial pydantic-validated POST on the same server and worker count, then error checks at 64
and 256 connections.

Run: ``make bench-service``. Prints what it measured in this run; no thresholds are asserted
(this machine is shared and noisy), but the targets are printed beside the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

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
    """Start ``python -m service`` on a free port and wait until /healthz answers."""
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


def lua_script(bodies: list[str]) -> str:
    items = ",\n".join("  [[" + b + "]]" for b in bodies)
    return f"""
local bodies = {{
{items}
}}
local i = 0
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

    errors = 0
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    if m:
        errors += sum(int(x) for x in m.groups())
    non2xx = num(r"Non-2xx or 3xx responses: (\d+)") or 0
    return {
        "rps": num(r"Requests/sec:\s+([\d.]+)") or 0.0,
        "p50_ms": latency("50%"),
        "p99_ms": latency("99%"),
        "requests": num(r"(\d+) requests in") or 0,
        "errors": errors + non2xx,
    }


def wrk(url: str, script: Path, connections: int, seconds: int) -> dict[str, float]:
    out = subprocess.run(
        ["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", "--latency", "-s", str(script), url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return parse(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--workers", type=int, default=1)
    a = ap.parse_args()
    server, url = start_server(["--workers", str(a.workers)], dict(os.environ, BCETUNE_BENCH_ENDPOINTS="1"))
    try:
        bodies = [json.dumps({"shape": s, "dtype": d, "reduction": r}) for s, d, r in SHAPES]
        for b in bodies:  # every distinct request answered once: the benchmark measures the serving path
            r = httpx.post(url + "/tiling", content=b, headers={"content-type": "application/json"})
            assert r.status_code == 200, r.text
        with tempfile.TemporaryDirectory() as tmp:
            script = Path(tmp) / "mix.lua"
            script.write_text(lua_script(bodies))
            print(f"wrk -t2, {a.seconds} s per run, {a.workers} uvicorn worker(s), server and wrk on this machine")
            rows = []
            for conns in (8,):
                trivial = wrk(url + "/bench/trivial", script, conns, a.seconds)
                tiling = wrk(url + "/tiling", script, conns, a.seconds)
                rows.append(("POST /bench/trivial", conns, trivial))
                rows.append(("POST /tiling (8 shapes)", conns, tiling))
                ratio = tiling["rps"] / trivial["rps"] if trivial["rps"] else 0.0
            for conns in (64, 256):
                rows.append(("POST /tiling (8 shapes)", conns, wrk(url + "/tiling", script, conns, a.seconds)))
        print(f"{'endpoint':<26}{'conns':>6}{'req/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'errors':>8}")
        for name, conns, r in rows:
            print(f"{name:<26}{conns:>6}{r['rps']:>10.0f}{r['p50_ms']:>9.2f}{r['p99_ms']:>9.2f}{r['errors']:>8.0f}")
        print(
            f"/tiling throughput = {100 * ratio:.1f}% of the trivial endpoint's (target >= 80%); "
            f"p99 at 8 connections {rows[1][2]['p99_ms']:.2f} ms (target <= 10 ms); "
            f"errors at 64/256 connections: {rows[2][2]['errors']:.0f}/{rows[3][2]['errors']:.0f} (target 0)"
        )
    finally:
        server.terminate()
        server.wait(timeout=10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
