"""``python -m service``: serve tuned tilings over HTTP with uvicorn.

Flags override BCETUNE_* environment variables; workers read the same settings from the
environment.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import uvicorn

from service.config import Settings
from service.store import load_snapshot
from tiling_model import TableError


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
    a = parser.parse_args(argv)
    settings = Settings(
        a.host,
        a.port,
        a.workers,
        a.tables,
        a.default_soc,
        a.log_level,
        a.reload_interval,
        a.max_body,
        a.max_batch,
        a.bench_endpoints,
    )
    try:
        settings.check()
        load_snapshot(settings.tables_dir)  # fail here, once, with the file and the problem named
    except (TableError, ValueError) as e:
        print(f"python -m service: error: {e}", file=sys.stderr)
        return 2
    os.environ.update(settings.to_env())
    uvicorn.run(
        "service.app:app_factory",
        factory=True,
        host=settings.host,
        port=settings.port,
        workers=settings.workers,
        log_level=settings.log_level,
        access_log=a.access_log,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
