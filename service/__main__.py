"""``python -m service``: serve tuned tilings over HTTP with uvicorn."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import uvicorn

from service.app import create_app
from tiling_model.tables import TableError


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m service", description=__doc__)
    parser.add_argument("--host", default=os.environ.get("BCETUNE_HOST", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("BCETUNE_PORT", "8000")))
    parser.add_argument(
        "--tables",
        type=Path,
        default=os.environ.get("BCETUNE_TABLES"),
        help="directory of <SoC>.json tables (default: the shipped ones)",
    )
    parser.add_argument("--log-level", default=os.environ.get("BCETUNE_LOG_LEVEL", "info"))
    args = parser.parse_args(argv)
    try:
        app = create_app(args.tables)
    except TableError as e:
        print(f"python -m service: error: {e}", file=sys.stderr)
        return 2
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)
    return 0


if __name__ == "__main__":
    sys.exit(main())
