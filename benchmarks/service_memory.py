"""The serving process's memory under requests that each leave something in its caches: distinct refused
batches (the first item past any device's memory, 255 more items parsed), then distinct valid ``/tiling``
requests, more than the answer cache holds. Prints the RSS after each phase; the bound is the answer
cache's (``--cache-mb``, 64 MiB) plus what the process holds anyway.

Run: ``python benchmarks/service_memory.py [--refused 2000] [--distinct 100000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
from collections import Counter
from pathlib import Path

import httpx
from service_load import cold_bodies, start_server

CONCURRENCY = 8


def rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    return int(next(x.split()[1] for x in status if x.startswith("VmRSS"))) / 1024


async def send(url: str, path: str, bodies: list[bytes]) -> Counter:
    seen: Counter = Counter()
    queue = iter(bodies)

    async def worker(c: httpx.AsyncClient) -> None:
        for body in queue:
            r = await c.post(url + path, content=body, headers={"content-type": "application/json"})
            seen[r.status_code] += 1

    async with httpx.AsyncClient(timeout=60) as c:
        await asyncio.gather(*(worker(c) for _ in range(CONCURRENCY)))
    return seen


def refused_batches(n: int, rng: random.Random) -> list[bytes]:
    out = []
    for i in range(n):
        items = [{"shape": [1 << 30, 16 + i], "dtype": "float32"}]  # 320 GiB and more: past every device
        items += [{"shape": [rng.randint(1, 1 << 24)], "dtype": "float32"} for _ in range(255)]
        out.append(json.dumps({"requests": items}).encode())
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--refused", type=int, default=2000)
    ap.add_argument("--distinct", type=int, default=100_000)
    ap.add_argument("--cache-mb", type=int, default=64)
    a = ap.parse_args()
    server, url = start_server(["--reload-interval", "0", "--cache-mb", str(a.cache_mb), "--per-client", "64"])
    try:
        print(f"fresh: RSS {rss_mib(server.pid):.0f} MiB", flush=True)
        seen = asyncio.run(send(url, "/tiling/batch", refused_batches(a.refused, random.Random(1))))
        print(
            f"after {a.refused} distinct refused batches ({dict(seen)}): RSS {rss_mib(server.pid):.0f} MiB", flush=True
        )
        bodies = [b.encode() for b in cold_bodies(a.distinct, seed=3)]
        seen = asyncio.run(send(url, "/tiling", bodies))
        print(f"after {a.distinct} distinct /tiling requests ({dict(seen)}): RSS {rss_mib(server.pid):.0f} MiB "
              f"(answer cache bound {a.cache_mb} MiB)")  # fmt: skip
    finally:
        server.terminate()
        server.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
