"""The service's cached path beside a bare FastAPI app's trivial POST, side by side in one run.

wrk (2 threads, 64 connections by default) on ``POST /tiling`` with the 8 bodies of the load benchmark's
warm mix (every one answered once before: all cache hits), against ``python -m service`` three ways:
as shipped (a repeated body answered from its bytes, ``service/repeats.py``), with ``--repeat-cache-mb 0``
(the answer cache behind routing and the pydantic parse), and ``benchmarks/bare_fastapi.py`` under
``uvicorn`` with its defaults (a POST of the same fields into a pydantic model, no middleware). The
servers run on CPU 0 and wrk on the others (2 or more CPUs); the three alternate, ``--rounds`` times,
and the ratios are of medians. Prints what it measured; asserts nothing (the machine is shared).

Run: ``python benchmarks/cached_vs_bare.py [--seconds 8] [--rounds 3] [--connections 64]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from service_load import SHAPES, free_port, lua_script, start_server, wrk

HERE = Path(__file__).resolve().parent


def start_bare() -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "bare_fastapi:app", "--port", str(port),
                             "--log-level", "warning"], cwd=HERE)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            httpx.get(url + "/docs", timeout=1)
            return proc, url
        except httpx.TransportError:
            time.sleep(0.1)
    proc.terminate()
    raise RuntimeError("the bare FastAPI app did not come up")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--connections", type=int, default=64)
    a = ap.parse_args()
    bodies = [json.dumps({"shape": s, "dtype": d, "reduction": r}) for s, d, r in SHAPES]
    pinned = len(os.sched_getaffinity(0)) >= 2
    cpus = sorted(os.sched_getaffinity(0))
    if pinned:
        os.sched_setaffinity(0, set(cpus[1:]))  # this process and wrk: the clients' CPUs

    def on_server_cpu(proc: subprocess.Popen) -> None:
        if pinned:
            for pid in [proc.pid, *_children(proc.pid)]:
                os.sched_setaffinity(pid, {cpus[0]})

    servers: dict[str, tuple[subprocess.Popen, str, str]] = {}
    try:
        for name, extra in (("service", []), ("service, --repeat-cache-mb 0", ["--repeat-cache-mb", "0"])):
            proc, url = start_server(["--workers", "1", *extra])
            for b in bodies:  # answered once: from here on, cache hits
                httpx.post(url + "/tiling", content=b, headers={"content-type": "application/json"})
            servers[name] = (proc, url, "/tiling")
        proc, url = start_bare()
        servers["bare FastAPI, trivial POST"] = (proc, url, "/trivial")
        for proc, _, _ in servers.values():
            on_server_cpu(proc)
        time.sleep(5)  # the service's worker warm-up done
        rps: dict[str, list[float]] = {name: [] for name in servers}
        p99: dict[str, list[float]] = {name: [] for name in servers}
        with tempfile.TemporaryDirectory() as tmp:
            script = Path(tmp) / "warm.lua"
            script.write_text(lua_script(bodies))
            for _ in range(a.rounds):
                for name, (_, url, path) in servers.items():
                    r = wrk(url + path, script, a.connections, a.seconds)
                    if r["errors"]:
                        print(f"  {name}: {r['errors']:.0f} errors in this run", flush=True)
                    rps[name].append(r["rps"])
                    p99[name].append(r["p99_ms"] or 0.0)
        where = f"servers on CPU {cpus[0]}, wrk on {cpus[1:]}" if pinned else "every process on every CPU"
        print(f"wrk -t2 -c{a.connections}, {a.seconds} s x {a.rounds} rounds, alternating; {where}")
        print(f"{'server':<32}{'req/s (median)':>16}{'runs':>28}{'p99 ms':>9}")
        for name in servers:
            runs = ", ".join(f"{x:.0f}" for x in rps[name])
            print(f"{name:<32}{statistics.median(rps[name]):>16.0f}{runs:>28}{statistics.median(p99[name]):>9.2f}")
        bare = statistics.median(rps["bare FastAPI, trivial POST"])
        for name in list(servers)[:2]:
            print(f"{name} / bare FastAPI: {statistics.median(rps[name]) / bare:.2f}x")
    finally:
        for proc, _, _ in servers.values():
            proc.terminate()
            proc.wait(timeout=10)
    return 0


def _children(pid: int) -> list[int]:
    """Every descendant of ``pid`` (the service's worker processes)."""
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    kids = [int(x) for x in out]
    return kids + [g for k in kids for g in _children(k)]


if __name__ == "__main__":
    sys.exit(main())
