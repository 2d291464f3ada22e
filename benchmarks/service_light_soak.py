"""Light traffic for minutes on a fresh service: what a container health check and an occasional user
send. Health checks every 0.5 s for 20 s, then one request every 1-10 s (random: /tiling, /healthz,
/readyz, /metrics, /explorer, an explanation) for ``--minutes``, then a burst of 100 at once. Every
answer must be a 200: the drain-rate estimate this replaced locked itself shut after 18 health checks.

Run: ``python benchmarks/service_light_soak.py [--minutes 10] [--proxy]``. Prints every non-200 and a
summary; exits 1 if any answer was not a 200.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx
from service_load import free_port, start_server

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "deploy" / "nginx"))
import run_proxy  # noqa: E402


def one(client: httpx.Client, url: str, rng: random.Random) -> tuple[str, int]:
    kind = rng.choice(["tiling", "tiling", "healthz", "readyz", "metrics", "explorer", "explain"])
    body = {"shape": [rng.randint(1, 1 << 24)], "dtype": rng.choice(["float32", "float16"])}
    if kind == "tiling":
        return kind, client.post(url + "/tiling", json=body).status_code
    if kind == "explain":
        return kind, client.post(url + "/tiling/explain", json=body).status_code
    return kind, client.get(f"{url}/{kind}").status_code


async def burst(url: str, n: int) -> list[int]:
    async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=n)) as c:
        got = await asyncio.gather(*(c.post(url + "/tiling", json={"shape": [1000 + i], "dtype": "float32"})
                                     for i in range(n)))  # fmt: skip
    return [r.status_code for r in got]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--proxy", action="store_true", help="through nginx (deploy/nginx/bcetune.conf)")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    server, url = start_server(["--forwarded-allow-ips", "127.0.0.1"] if a.proxy else [])
    proxy = None
    if a.proxy:
        listen = free_port()
        proxy = run_proxy.start(listen, int(url.rsplit(":", 1)[1]), Path(tempfile.mkdtemp()))
        url = f"http://127.0.0.1:{listen}"
    rng = random.Random(a.seed)
    seen: Counter = Counter()
    bad: list[str] = []
    start = time.monotonic()
    try:
        with httpx.Client(timeout=30) as client:  # a new connection each time where the server closed it
            for _ in range(40):  # health checks every 0.5 s for 20 s
                code = client.get(url + "/healthz").status_code
                seen[("healthz", code)] += 1
                if code != 200:
                    bad.append(f"{time.monotonic() - start:.1f} s healthz {code}")
                time.sleep(0.5)
            until = time.monotonic() + 60 * a.minutes
            while time.monotonic() < until:
                kind, code = one(client, url, rng)
                seen[(kind, code)] += 1
                if code != 200:
                    bad.append(f"{time.monotonic() - start:.1f} s {kind} {code}")
                    print(bad[-1], flush=True)
                time.sleep(rng.uniform(1.0, 10.0))
        for code in asyncio.run(burst(url, 100)):
            seen[("burst", code)] += 1
            if code != 200:
                bad.append(f"burst {code}")
    finally:
        if proxy is not None:
            proxy.terminate()
        server.terminate()
        server.wait()
    total, route = sum(seen.values()), "through nginx" if a.proxy else "bare"
    print(
        f"{total} requests over {(time.monotonic() - start) / 60:.1f} min ({route}): {total - len(bad)} answered "
        f"200, {len(bad)} not; by kind and status: {dict(sorted(seen.items()))}"
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
