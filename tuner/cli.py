"""``python -m tuner sweep ...``: tune tilings and write the table that ships with builds."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import optuna

from tiling_model import DTYPES, REDUCTIONS, known_socs
from tuner.backends import BACKENDS, make_backend
from tuner.storage import DEFAULT_STORAGE, open_storage
from tuner.sweep import DEFAULT_SIZES, DEFAULT_TRIALS, TABLES_DIR, run_sweep, sweep_keys


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")


def _csv(choices: Sequence[str]) -> Callable[[str], list[str]]:
    def parse(text: str) -> list[str]:
        items = [x.strip() for x in text.split(",") if x.strip()]
        bad = [x for x in items if x not in choices]
        if bad or not items:
            raise argparse.ArgumentTypeError(f"{text!r}: choose from {', '.join(choices)}")
        return items

    return parse


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"sizes must be comma-separated integers, got {text!r}") from None
    if not sizes or any(s < 1 for s in sizes):
        raise argparse.ArgumentTypeError(f"sizes must be positive element counts, got {text!r}")
    return sizes


def _weights(text: str) -> list[bool]:
    return [x == "true" for x in _csv(("true", "false"))(text)]


def _positive(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        v = 0
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return v


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m tuner", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    s = sub.add_parser("sweep", help="tune every (dtype, reduction, weight, size) key of one SoC")
    s.add_argument("--soc", required=True, choices=known_socs())
    s.add_argument("--dtypes", type=_csv(DTYPES), default=list(DTYPES))
    s.add_argument("--reductions", type=_csv(REDUCTIONS), default=list(REDUCTIONS))
    s.add_argument("--weights", type=_weights, default=[True, False], help="true,false (weight input present)")
    s.add_argument("--sizes", type=_sizes, default=list(DEFAULT_SIZES), help="element counts to tune at")
    s.add_argument("--trials", type=_positive, default=DEFAULT_TRIALS, help="completed trials per study")
    s.add_argument("--backend", default="model", choices=sorted(BACKENDS))
    s.add_argument("--storage", default=DEFAULT_STORAGE, help="Optuna RDB URL (SQLite file by default)")
    s.add_argument("--out", type=Path, help="table path (default: the shipped service/tables/<SOC>.json)")
    s.add_argument("--no-progress", action="store_true")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    out = args.out or TABLES_DIR / f"{args.soc}.json"
    keys = sweep_keys(args.soc, args.dtypes, args.reductions, args.weights, args.sizes)
    try:
        storage = open_storage(args.storage)
        start = time.perf_counter()
        table = run_sweep(keys, make_backend(args.backend), storage, args.trials, out, not args.no_progress)
    except ValueError as e:
        print(f"python -m tuner: error: {e}", file=sys.stderr)
        return 2
    took = time.perf_counter() - start
    print(f"wrote {out}: {len(table.entries)} entries, {args.trials} trials each, {took:.1f} s")
    return 0
