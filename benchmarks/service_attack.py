"""Attacker / victim benchmark of the service (one uvicorn worker, everything on one host).

The victim is wrk on ``POST /tiling`` (4 connections from 127.0.0.1): the cached mix (8 shapes
answered before) and the distinct mix (every request new). Beside it, from 127.0.0.2 (another client
address), an attacker: 4 or 16 connections of distinct pictures (each request sent and its connection
closed 0.1 s later, as a client that navigates away), distinct explanations, distinct 256-item batches (both
waiting for their answers and ignoring Retry-After), 1,000 idle connections that reconnect when closed,
1,900-item batches (refused: too long), batches whose first item is refused (255 more parsed), 400
connections sending a body a byte a second, 1,000 connections with a request's headers half sent, or 200
connections of pictures each naming another client in X-Forwarded-For. Each row's victim runs twice on
that row's fresh server: alone, then beside its attacker (side by side: the host's speed drifts between
rows by a third on a shared VM); the targets: the victim keeps >= 80% of its throughput
and its p99 stays under 50 ms. ``--proxy``: every client goes through nginx (deploy/nginx/bcetune.conf,
the production deployment) in front of the service, which believes its X-Forwarded-For.

``--pin`` (the default on a host of 2 or more CPUs): the server side (the service, its worker, nginx) runs on
CPU 0 and every client (victim, attacker, probe) on the others, the attacker at nice 19, as if each had a
host of its own: the figure then measures the server's defences, not contention for one host's cores (an
attacker's own CPU is its own machine's; its row's "attacker saw" shows what it still sent). ``--no-pin``
shares every core at one priority, as the earlier runs did.

Run: ``make bench-service`` (after the load benchmark) or ``python benchmarks/service_attack.py [--proxy]``;
``--repeat 3`` runs each row on three fresh servers and shows the median round (one round moves by +-15%
on a shared VM).
Prints what it measured; asserts nothing (the machine is shared and noisy). ``--json FILE`` also writes
every row's figures (the proxy test reads them).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
from service_load import SHAPES, cold_bodies, free_port, lua_script, parse, random_shape, start_server

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "deploy" / "nginx"))
import run_proxy  # noqa: E402

ATTACKS = [("pictures", 4), ("pictures", 16), ("explanations", 4), ("explanations", 16), ("batches", 4),
           ("batches", 16), ("idle", 1000), ("too-long", 4), ("bad-first", 4), ("slow-body", 400),
           ("partial", 1000), ("spoofed", 200)]  # fmt: skip
ATTACKER_ADDRESS = "127.0.0.2"  # Linux routes all of 127/8 to the loopback: a second client address
VICTIM_CONNECTIONS = 4


def victim(url: str, bodies: list[str], seconds: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "mix.lua"
        script.write_text(lua_script(bodies))
        out = subprocess.run(
            ["wrk", "-t2", f"-c{VICTIM_CONNECTIONS}", f"-d{seconds}s", "--latency", "-s", str(script), url + "/tiling"],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
    return parse(out)


COUNT_STATUSES = """
local threads = {}
local base_setup = setup
function setup(thread)
  if base_setup then base_setup(thread) end
  table.insert(threads, thread)
end
statuses = {}
function response(status, headers, body)
  local key = tostring(status)
  if status ~= 200 and headers["retry-after"] == nil and headers["Retry-After"] == nil then
    key = key .. " without Retry-After"
  end
  statuses[key] = (statuses[key] or 0) + 1
end
function done(summary, latency, requests)
  local total = {}
  for _, t in ipairs(threads) do
    for k, v in pairs(t:get("statuses")) do total[k] = (total[k] or 0) + v end
  end
  for k, v in pairs(total) do io.write(string.format("status %s: %d\\n", k, v)) end
end
"""


def overload(
    url: str, bodies: list[str], seconds: int, pid: int
) -> tuple[dict[str, float], dict[str, int], float, dict[str, object]]:
    """1,000 connections: wrk on 996 (clients that send again at once, ignoring Retry-After) and the
    probe on 4 (clients that honour it). wrk's figures, its answers by status (a refusal without
    Retry-After counted apart), the server's RSS after it (MiB), the probe's served latency."""
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "mix.lua"
        script.write_text(lua_script(bodies) + COUNT_STATUSES)
        probe_bodies = Path(tmp) / "probe.json"  # the probe's own slice: no body wrk sends
        probe_bodies.write_text(json.dumps(bodies[::-1][:20_000]))
        port = url.rsplit(":", 1)[1]
        prober = subprocess.Popen(
            [sys.executable, __file__, "--probe", str(probe_bodies), "--seconds", str(seconds), "--port", port],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        out = subprocess.run(
            ["wrk", "-t2", f"-c{1000 - PROBE_CONNECTIONS}", f"-d{seconds}s", "--timeout", "5s", "--latency", "-s",
             str(script), url + "/tiling"], capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        probed = json.loads(prober.communicate(timeout=60)[0])
    statuses = {m.group(1): int(m.group(2)) for m in re.finditer(r"status (.+): (\d+)", out)}
    rss = int(next(x.split()[1] for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith("VmRSS")))
    return parse(out), statuses, rss / 1024, probed


PROBE_ADDRESS = "127.0.0.3"
PROBE_CONNECTIONS = 4


async def _probe_connection(port: int, bodies: list[str], until: float, served: list[float], seen: Counter) -> None:
    """One client that honours Retry-After: each request timed from its write to its whole answer; a
    refusal waits its Retry-After, then the next request goes (on the same connection if kept)."""
    reader = writer = None
    i = 0
    while time.monotonic() < until:
        if writer is None:
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(PROBE_ADDRESS, 0))
            except OSError:
                seen["connect error"] += 1
                await asyncio.sleep(0.1)
                continue
        assert reader is not None
        i += 1
        sent = time.monotonic()
        try:
            writer.write(request_bytes("/tiling", bodies[i % len(bodies)].encode()))
            await writer.drain()
            status, retry_after, close = await asyncio.wait_for(_read_answer(reader), 10)
        except (OSError, asyncio.IncompleteReadError, TimeoutError) as e:
            # a client timeout, or the connection closed (idle for its Retry-After, it may be the one closed
            # for another's request at the connection cap): the client reconnects
            seen["timed out (10 s)" if isinstance(e, TimeoutError) else "closed by the server"] += 1
            writer.close()
            writer = None
            continue
        seen[str(status)] += 1
        if status == 200:
            served.append(time.monotonic() - sent)
        if close:
            writer.close()
            writer = None
        if retry_after:
            await asyncio.sleep(retry_after)


async def _read_answer(reader: asyncio.StreamReader) -> tuple[int, float, bool]:
    """One whole answer: its status, its Retry-After (0: none) and whether it closes the connection."""
    head = await reader.readuntil(b"\r\n\r\n")
    m = re.search(rb"content-length: (\d+)", head, re.IGNORECASE)
    await reader.readexactly(int(m.group(1)) if m else 0)
    retry = re.search(rb"retry-after: (\d+)", head, re.IGNORECASE)
    closing = re.search(rb"connection: close", head, re.IGNORECASE) is not None
    return int(head.split(b" ", 2)[1]), float(retry.group(1)) if retry else 0.0, closing


async def probe(port: int, bodies: list[str], seconds: float) -> dict[str, object]:
    """The served latency under overload as a client that honours Retry-After sees it (wrk's figures
    count the requests its connections send against a Retry-After too: held until it has passed)."""
    served: list[float] = []
    seen: Counter = Counter()
    until = time.monotonic() + seconds
    slices = [bodies[k::PROBE_CONNECTIONS] for k in range(PROBE_CONNECTIONS)]
    await asyncio.gather(*(_probe_connection(port, s, until, served, seen) for s in slices))
    served.sort()

    def pct(q: float) -> float:
        return round(1e3 * served[min(len(served) - 1, int(q * len(served)))], 1) if served else float("nan")

    return {"served": len(served), "p50_ms": pct(0.5), "p99_ms": pct(0.99), "max_ms": pct(1.0), "answers": dict(seen)}


def gc_pause_max(url: str) -> str:
    """The longest garbage-collection pause the server measured (its /metrics; n/a: a server that does
    not measure it)."""
    for line in httpx.get(url + "/metrics").text.splitlines():
        if line.startswith("bcetune_gc_pause_max_seconds "):
            return f"{1e3 * float(line.split()[1]):.1f} ms"
    return "n/a"


# --- the attacker (run as its own process: python service_attack.py --attack KIND ...) ---------------


def attack_body(kind: str, rng: random.Random) -> tuple[str, bytes]:
    one = {"shape": random_shape(rng), "dtype": rng.choice(["float32", "float16"]), "weight": rng.random() < 0.5}
    if kind in ("pictures", "spoofed"):
        return "/tiling/plot/" + rng.choice(["core_map", "ub", "timeline", "landscape"]), json.dumps(one).encode()
    if kind == "explanations":
        return "/tiling/explain", json.dumps(one).encode()
    items = 1900 if kind == "too-long" else 256
    batch = [{"shape": random_shape(rng), "dtype": "float32", "reduction": "none"} for _ in range(items)]
    if kind == "bad-first":  # refused at its first item: past any device's memory
        batch[0]["shape"] = [1 << 30, rng.randint(16, 1 << 20)]
    return "/tiling/batch", json.dumps({"requests": batch}).encode()


def request_bytes(path: str, body: bytes, extra: str = "") -> bytes:
    head = (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            f"{extra}\r\n")  # fmt: skip
    return head.encode() + body


BODIES_PER_CONNECTION = 64  # made before the attack, sent in turn: the attacker's own CPU spent up front


async def _connection(kind: str, host: str, port: int, seed: int, until: float, seen: Counter) -> None:
    rng = random.Random(seed)
    extra = f"X-Forwarded-For: 10.{seed % 250}.{seed // 250}.7\r\n" if kind == "spoofed" else ""
    held = kind in ("idle", "partial", "slow-body")
    bodies = [] if held else [request_bytes(*attack_body(kind, rng), extra) for _ in range(BODIES_PER_CONNECTION)]
    sent = 0
    while time.monotonic() < until:
        try:
            reader, writer = await asyncio.open_connection(host, port, local_addr=(ATTACKER_ADDRESS, 0))
        except OSError:
            seen["connect error"] += 1
            await asyncio.sleep(0.01)
            continue
        try:
            if held:  # held open (sending nothing more, or a byte a second)
                if kind == "partial":
                    writer.write(b"POST /tiling HTTP/1.1\r\nHost: x\r\nContent-")
                elif kind == "slow-body":
                    writer.write(b"POST /tiling HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                 b"Content-Length: 1000\r\n\r\n{")  # fmt: skip
                outcome = "held to the end"
                while time.monotonic() < until:
                    if kind == "slow-body":
                        writer.write(b" ")
                    left = max(0.01, until - time.monotonic())  # a byte a second, or one wait to the end
                    try:
                        wait = min(1.0, left) if kind == "slow-body" else left
                        got = await asyncio.wait_for(reader.read(65536), wait)
                    except TimeoutError:
                        continue
                    if not got:
                        outcome = "closed by the server"
                        break
                    seen[f"answered {got.split(b' ', 2)[1].decode(errors='replace')}"] += 1
                seen[outcome] += 1
                continue
            while time.monotonic() < until:
                writer.write(bodies[sent % len(bodies)])
                sent += 1
                await writer.drain()
                if kind == "pictures":  # sent, and given up on 0.1 s later (a client that navigates away)
                    seen["sent and abandoned"] += 1
                    await asyncio.sleep(0.1)
                    break
                try:  # an answer that comes after the attack's end is not waited for
                    status = (await asyncio.wait_for(_read_answer(reader), until - time.monotonic() + 1))[0]
                    seen[str(status)] += 1
                except TimeoutError:
                    seen["unanswered at the end"] += 1
                    break
        except (OSError, asyncio.IncompleteReadError):
            seen["connection lost"] += 1
        finally:
            writer.close()


async def attack(kind: str, conns: int, seconds: float, port: int) -> Counter:
    seen: Counter = Counter()
    until = time.monotonic() + seconds + 0.5 * (kind in ("bad-first", "batches", "too-long"))  # its bodies made
    await asyncio.gather(*(_connection(kind, "127.0.0.1", port, i, until, seen) for i in range(conns)))
    return seen


def start_attacker(kind: str, conns: int, seconds: float, port: int, niced: bool) -> subprocess.Popen[str]:
    """The attacker's process; ``niced``: at nice 19, so that on the clients' CPU it takes what the victim's
    wrk leaves (as on a machine of its own) instead of slowing the victim's client."""
    return subprocess.Popen(
        [sys.executable, __file__, "--attack", kind, "--conns", str(conns), "--seconds", str(seconds), "--port",
         str(port)], stdout=subprocess.PIPE, text=True, preexec_fn=(lambda: os.nice(19)) if niced else None,
    )  # fmt: skip


def settle(url: str, limit_s: float = 60) -> float:
    """Seconds after the attacker stopped until the server answers /healthz within 20 ms three times
    in a row (the work an attack left behind: 0 when none)."""
    start, fast = time.monotonic(), 0
    with httpx.Client(timeout=limit_s) as client:  # one client: a new one costs ~30 ms by itself
        while fast < 3 and time.monotonic() - start < limit_s:
            t = time.monotonic()
            try:
                ok = client.get(url + "/healthz").status_code == 200
            except httpx.TransportError:
                ok = False
            fast = fast + 1 if ok and time.monotonic() - t < 0.02 else 0
            time.sleep(0.05)
    return max(0.0, time.monotonic() - start - 0.15)


@contextlib.contextmanager
def on_cpus(cpus: set[int] | None) -> Iterator[None]:
    """Processes started inside run on ``cpus`` (they inherit this process's affinity at fork); None: as
    they are."""
    if cpus is None:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def cpu_split(pin: bool) -> tuple[set[int] | None, set[int] | None]:
    """(server CPUs, client CPUs): the first CPU and the rest, or (None, None) unpinned or on one CPU."""
    cpus = sorted(os.sched_getaffinity(0))
    if not pin or len(cpus) < 2:
        return None, None
    return {cpus[0]}, set(cpus[1:])


# --- the run -----------------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--attack", choices=[kind for kind, _ in ATTACKS])
    ap.add_argument("--conns", type=int, default=4)
    ap.add_argument("--probe", default="", help="(internal) run the served-latency probe on these bodies (JSON)")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--overload-only", action="store_true", help="only the 1,000-connection runs")
    ap.add_argument("--only", default="", help="attacker rows to run, e.g. batches,explanations (no overload runs)")
    ap.add_argument("--max-connections", type=int, default=1000, help="the server's connection cap")
    ap.add_argument("--proxy", action="store_true", help="every client through nginx (deploy/nginx/bcetune.conf)")
    ap.add_argument("--json", type=Path, help="also write every row's figures here")
    ap.add_argument("--repeat", type=int, default=1,
                    help="rounds per row, each on a fresh server; the row shows its median round")  # fmt: skip
    ap.add_argument("--mix", choices=["cached", "distinct", "both"], default="both", help="the victim's mixes")
    ap.add_argument("--pin", action=argparse.BooleanOptionalAction, default=True,
                    help="server side on CPU 0, clients on the other CPUs (default; needs 2 or more)")  # fmt: skip
    a = ap.parse_args()
    if a.probe:  # the served-latency probe process
        print(json.dumps(asyncio.run(probe(a.port, json.loads(Path(a.probe).read_text()), a.seconds))))
        return 0
    if a.attack:  # the attacker process
        seen = asyncio.run(attack(a.attack, a.conns, a.seconds, a.port))
        print(json.dumps(dict(seen)))
        return 0
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # the attacker's 1,000 connections
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))
    cached = [json.dumps({"shape": s, "dtype": d, "reduction": r}) for s, d, r in SHAPES]
    distinct = cold_bodies(400_000, seed=7)

    proxies: list[subprocess.Popen] = []
    server_cpus, client_cpus = cpu_split(a.pin)
    if client_cpus is not None:
        os.sched_setaffinity(0, client_cpus)  # this process and what it starts: the clients

    def fresh_server(*extra: str) -> tuple[subprocess.Popen, str, int]:
        """A new service (and, with --proxy, nginx before it); the URL and port clients use."""
        args = ["--workers", "1", "--max-connections", str(a.max_connections), *extra]
        with on_cpus(server_cpus):
            server, url = start_server([*args, "--forwarded-allow-ips", "127.0.0.1"] if a.proxy else args)
        server.direct_url = url  # type: ignore[attr-defined]  # its own /metrics and /healthz
        if a.proxy:
            listen = free_port()
            with on_cpus(server_cpus):
                proxies.append(run_proxy.start(listen, int(url.rsplit(":", 1)[1]), Path(tempfile.mkdtemp())))
            url = f"http://127.0.0.1:{listen}"
        for b in cached:  # answered once: from here on the cached mix is cache hits
            httpx.post(url + "/tiling", content=b, headers={"content-type": "application/json"})
        time.sleep(5)  # the explorer's warm-up done
        return server, url, int(url.rsplit(":", 1)[1])

    def stop(server: subprocess.Popen) -> None:
        server.kill()  # a server still busy with what an attack left does not stop on a TERM in time
        server.wait()
        while proxies:
            proxies.pop().terminate()

    used = 0

    def victim_run(url: str, mix: str) -> dict[str, float]:
        """The victim's figures; ``served`` counts its 200s a second (a fast 503 is not throughput)."""
        nonlocal used
        bodies = cached if mix == "cached" else distinct[used % len(distinct) :] + distinct[: used % len(distinct)]
        r = victim(url, bodies, a.seconds)
        if mix == "distinct":
            used += int(r["requests"])
        r["served"] = r["rps"] * (r["requests"] - r["non2xx"]) / r["requests"] if r["requests"] else 0.0
        return r

    attacks = ATTACKS
    if a.only:
        wanted = set(a.only.split(","))
        unknown = wanted - {kind for kind, _ in attacks}
        if unknown:
            ap.error(f"--only: no attacker row {', '.join(sorted(unknown))}")
        attacks = [(kind, conns) for kind, conns in attacks if kind in wanted]
    rows: list[dict[str, object]] = []
    route = "through nginx (deploy/nginx/bcetune.conf)" if a.proxy else "to the bare service"
    cpus = (f"server side on CPU {sorted(server_cpus)}, clients on {sorted(client_cpus)}" if server_cpus and client_cpus
            else "every process on every CPU")  # fmt: skip
    print(f"victim: wrk -t2 -c{VICTIM_CONNECTIONS} {a.seconds} s on POST /tiling; attacker from {ATTACKER_ADDRESS}; "
          f"every client {route}; a fresh server for every row; {cpus}")  # fmt: skip
    print(f"{'attacker':<22}{'victim mix':<11}{'served/s':>9}{'alone':>7}{'kept':>6}{'p99 ms':>8}{'alone':>7}"
          f"{'non-200':>8}{'busy s':>7}{'GC max':>9}{'RSS MiB':>8}  attacker saw")  # fmt: skip
    mixes = ("cached", "distinct") if a.mix == "both" else (a.mix,)

    def attacked_round(kind: str, conns: int, mix: str) -> dict[str, object]:
        """One fresh server: the victim alone, then beside its attacker."""
        server, url, port = fresh_server()
        try:
            alone = victim_run(url, mix)  # side by side: the same server, just before its attack
            attacker = start_attacker(kind, conns, a.seconds + 1, port, niced=client_cpus is not None)
            time.sleep(1.0)  # the attack is under way when the victim starts
            r = victim_run(url, mix)
            seen = json.loads(attacker.communicate(timeout=120)[0] or "{}")
            rss = rss_mib(server.pid)
            busy = settle(server.direct_url)  # type: ignore[attr-defined]  # what the attack left, still running
            gc_max = gc_pause_max(server.direct_url)  # type: ignore[attr-defined]
        finally:
            stop(server)
        kept = r["served"] / alone["served"] if alone["served"] else 0.0
        return {"attacker": kind, "conns": conns, "mix": mix, "served": r["served"], "alone": alone["served"],
                "kept": kept, "p99_ms": r["p99_ms"], "alone_p99_ms": alone["p99_ms"], "non2xx": r["non2xx"],
                "busy_s": busy, "gc_max": gc_max, "rss_mib": rss, "attacker_saw": seen, "proxy": a.proxy,
                "pinned": server_cpus is not None}  # fmt: skip

    for mix in () if a.overload_only else mixes:
        for kind, conns in attacks:
            rounds = [attacked_round(kind, conns, mix) for _ in range(a.repeat)]
            rounds.sort(key=lambda x: float(x["kept"]))  # type: ignore[arg-type]
            row = {**rounds[len(rounds) // 2], "kept_runs": [x["kept"] for x in rounds]}  # the median round
            rows.append(row)
            busy = float(row["busy_s"])  # type: ignore[arg-type]
            busy_text = f"{busy:.1f}" if busy < 59 else ">60"
            runs = "" if a.repeat == 1 else "  runs " + "/".join(f"{100 * float(k):.0f}" for k in row["kept_runs"])  # type: ignore[attr-defined]
            print(f"{f'{conns} x {kind}':<22}{mix:<11}{row['served']:>9.0f}{row['alone']:>7.0f}"
                  f"{100 * float(row['kept']):>5.0f}%{row['p99_ms']:>8.2f}{row['alone_p99_ms']:>7.2f}"  # type: ignore[arg-type]
                  f"{row['non2xx']:>8.0f}{busy_text:>7}{row['gc_max']:>9}{row['rss_mib']:>8.0f}"
                  f"  {row['attacker_saw']}{runs}", flush=True)  # fmt: skip
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))
    if a.only:
        return 0
    # 1,000 clients' stand-in from one address: the bare service's per-address limits lifted for it (through
    # nginx they hold: one address's 1,000 connections get its limit_conn)
    server, url, _ = fresh_server("--per-address-connections", "0", "--per-address-requests", "0")
    try:
        for mix in ("cached", "distinct"):
            bodies = cached if mix == "cached" else distinct[used % len(distinct) :] + distinct[: used % len(distinct)]
            r, statuses, rss, probed = overload(url, bodies, 30, server.pid)
            used += int(r["requests"]) if mix == "distinct" else 0
            print(f"1,000 connections for 30 s, {mix} mix: wrk (996 connections, Retry-After ignored) "
                  f"{r['rps']:.0f} req/s, p99 {r['p99_ms']:.1f} ms (served, refused and held), "
                  f"{r['timeouts']:.0f} client timeouts (5 s), answers {statuses}; probe (4 connections, "
                  f"Retry-After honoured): served p50 {probed['p50_ms']} ms, p99 {probed['p99_ms']} ms, "
                  f"max {probed['max_ms']} ms, answers {probed['answers']}; server RSS {rss:.0f} MiB",
                  flush=True)  # fmt: skip
        print(f"longest GC pause of the serving process (the overload runs): {gc_pause_max(server.direct_url)}")  # type: ignore[attr-defined]
    finally:
        stop(server)
    return 0


def rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    return int(next(x.split()[1] for x in status if x.startswith("VmRSS"))) / 1024


if __name__ == "__main__":
    sys.exit(main())
