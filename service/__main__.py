"""``python -m service``: serve tuned tilings over HTTP with uvicorn.

Flags override BCETUNE_* environment variables; workers read the same settings from the
environment.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import sys
from collections.abc import Sequence
from pathlib import Path

import uvicorn

from service import logs
from service.config import Settings
from service.http import GuardedHttpToolsProtocol
from service.store import load_snapshot
from service.trust import TrustedProxies
from tiling_model import TableError


def connection_cap(wanted: int) -> int:
    """``wanted`` connections, within the open-file limit (raised to its hard limit first): a server
    out of file descriptors fails every client, one at its connection cap answers 503s."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return max(1, min(wanted, soft - 64))  # 64: tables, logs, the listening socket


def main(argv: Sequence[str] | None = None) -> int:
    try:
        env = Settings.from_env()
    except ValueError as e:
        print(f"python -m service: error: {e}", file=sys.stderr)
        return 2
    parser = argparse.ArgumentParser(prog="python -m service", description=__doc__)
    parser.add_argument("--host", default=env.host)
    parser.add_argument("--port", type=int, default=env.port)
    parser.add_argument("--workers", type=int, default=env.workers)
    parser.add_argument("--tables", type=Path, default=env.tables_dir, help="directory of <SoC>.json tables")
    parser.add_argument("--default-soc", default=env.default_soc)
    parser.add_argument("--log-level", default=env.log_level)
    parser.add_argument(
        "--reload-interval",
        type=float,
        default=env.reload_interval_s,
        help="seconds between checks of the tables directory (0: only on SIGHUP)",
    )
    parser.add_argument("--max-body", type=int, default=env.max_body_bytes, help="request body limit, bytes")
    parser.add_argument("--max-batch", type=int, default=env.max_batch, help="requests per /tiling/batch")
    parser.add_argument("--access-log", action="store_true", help="uvicorn access log (off: metrics count requests)")
    parser.add_argument("--bench-endpoints", action="store_true", default=env.bench_endpoints, help=argparse.SUPPRESS)
    parser.add_argument("--max-header", type=int, default=env.max_header_bytes, help="request line + headers, bytes")
    parser.add_argument(
        "--request-timeout", type=float, default=env.request_timeout_s, help="seconds for a request to arrive complete"
    )
    parser.add_argument("--keepalive-timeout", type=int, default=env.keepalive_timeout_s, help="idle keep-alive, s")
    parser.add_argument("--max-connections", type=int, default=env.max_connections, help="open connections per worker")
    parser.add_argument(
        "--batch-budget", type=float, default=env.batch_budget_s, help="server seconds per batch for uncached items"
    )
    parser.add_argument(
        "--max-active", type=int, default=env.max_active, help="requests in progress per worker (past it: 503 at once)"
    )
    parser.add_argument(
        "--shed-wait",
        type=float,
        default=env.shed_wait_s,
        help="s a request may wait to start; waits over it for --shed-interval: a standing queue, 503 at once",
    )
    parser.add_argument("--shed-interval", type=float, default=env.shed_interval_s, help=argparse.SUPPRESS)
    parser.add_argument(
        "--per-address-connections",
        type=int,
        default=env.per_address_connections,
        help="open connections per client address (past it: 503; 0: no limit; a trusted proxy is exempt)",
    )
    parser.add_argument(
        "--per-address-requests",
        type=int,
        default=env.per_address_requests,
        help="requests in progress per client address, arriving ones included (past it: 429; 0: no limit)",
    )
    parser.add_argument(
        "--send-timeout", type=float, default=env.send_timeout_s, help="s answers may stay unread before a close"
    )
    parser.add_argument("--cache-mb", type=int, default=env.cache_mb, help="answer cache bound per worker, MiB")
    parser.add_argument(
        "--repeat-cache-mb", type=int, default=env.repeat_cache_mb,
        help="repeated /tiling bodies' answers kept by their bytes per worker, MiB (0: off)",
    )  # fmt: skip
    parser.add_argument(
        "--forwarded-allow-ips",
        default=env.forwarded_allow_ips,
        help="proxies whose X-Forwarded-For names the client (comma-separated addresses or networks; default none)",
    )
    parser.add_argument(
        "--heavy-workers", type=int, default=env.heavy_workers, help="worker processes for explanations and pictures"
    )
    parser.add_argument(
        "--per-client",
        type=int,
        default=env.per_client,
        help="explanations, pictures and batches in flight per client address (past it: 429)",
    )
    parser.add_argument(
        "--max-queued",
        type=int,
        default=env.max_queued,
        help="explanations and pictures waiting for a worker (past it: 503)",
    )
    parser.add_argument(
        "--heavy-share",
        "--batch-share",  # its name before it was every expensive request's share
        dest="heavy_share",
        type=float,
        default=env.heavy_share,
        help="share of a core batches, explanations and pictures get while other requests are in flight",
    )
    parser.add_argument(
        "--shutdown-grace",
        type=int,
        default=env.shutdown_grace_s,
        help="s requests under way get to finish after SIGTERM, then they are cancelled",
    )
    a = parser.parse_args(argv)
    settings = Settings(
        host=a.host,
        port=a.port,
        workers=a.workers,
        tables_dir=a.tables,
        default_soc=a.default_soc,
        log_level=a.log_level,
        reload_interval_s=a.reload_interval,
        max_body_bytes=a.max_body,
        max_batch=a.max_batch,
        bench_endpoints=a.bench_endpoints,
        max_header_bytes=a.max_header,
        request_timeout_s=a.request_timeout,
        keepalive_timeout_s=a.keepalive_timeout,
        max_connections=a.max_connections,
        batch_budget_s=a.batch_budget,
        max_active=a.max_active,
        shed_wait_s=a.shed_wait,
        shed_interval_s=a.shed_interval,
        per_address_connections=a.per_address_connections,
        per_address_requests=a.per_address_requests,
        send_timeout_s=a.send_timeout,
        cache_mb=a.cache_mb,
        repeat_cache_mb=a.repeat_cache_mb,
        forwarded_allow_ips=a.forwarded_allow_ips,
        heavy_workers=a.heavy_workers,
        per_client=a.per_client,
        max_queued=a.max_queued,
        heavy_share=a.heavy_share,
        shutdown_grace_s=a.shutdown_grace,
    )
    try:
        settings.check()
        load_snapshot(settings.tables_dir)  # fail here, once, with the file and the problem named
    except (TableError, ValueError) as e:
        print(f"python -m service: error: {e}{_tables_origin(argv, settings.tables_dir)}", file=sys.stderr)
        return 2
    os.environ.update(settings.to_env())
    uvicorn.run(
        "service.app:app_factory",
        factory=True,
        host=settings.host,
        port=settings.port,
        workers=settings.workers,
        log_level=settings.log_level,
        log_config=logs.uvicorn_log_config(settings.log_level),
        access_log=a.access_log,
        http=GuardedHttpToolsProtocol,
        # not uvloop: saturated, it accepts one new connection per pass over the others (measured: at 1,000
        # connections the last ones waited 2-15 s for their first answer); asyncio's loop accepts them all
        loop="asyncio",
        limit_concurrency=connection_cap(settings.max_connections),
        timeout_keep_alive=settings.keepalive_timeout_s,
        # a stop waits this long for requests under way, then cancels them: uvicorn's own bound (without it a
        # stop waited for every task, a picture's share wait among them, past an orchestrator's kill)
        timeout_graceful_shutdown=settings.shutdown_grace_s,
        # X-Forwarded-For only from the proxies the operator names (uvicorn trusts loopback by default: one
        # client with a header per connection would be as many clients)
        proxy_headers=bool(TrustedProxies(settings.forwarded_allow_ips)),
        forwarded_allow_ips=settings.forwarded_allow_ips or None,
    )
    return 0


def _tables_origin(argv: Sequence[str] | None, tables: Path) -> str:
    """Where the tables directory came from, for an error about it: the flag, the environment or the
    default (a path a user never typed is otherwise a puzzle)."""
    given = sys.argv[1:] if argv is None else argv
    if any(x == "--tables" or x.startswith("--tables=") for x in given):
        return " (from --tables)"
    if os.environ.get("BCETUNE_TABLES"):
        return f" (from BCETUNE_TABLES={os.environ['BCETUNE_TABLES']})"
    return f" (the shipped tables, {tables}: is the checkout whole?)"


if __name__ == "__main__":
    sys.exit(main())
