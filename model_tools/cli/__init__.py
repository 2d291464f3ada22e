"""``python -m model_tools``: the tiling model from the command line.

``tiling`` computes, checks and times one tiling (tiling_cmd); ``predict``, ``calibrate`` and ``plot``
drive the cost model (model_cmds); ``args`` holds the argument parsing they share (and tuner's CLI uses).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from model_tools.cli.args import Parser
from model_tools.cli.model_cmds import add_model_commands, run_model_command
from model_tools.cli.tiling_cmd import add_tiling_command, run_tiling_command
from tiling_model.extras import missing_extra


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="python -m model_tools", description=__doc__.split("\n\n")[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    add_tiling_command(sub)
    add_model_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "tiling":
            return run_tiling_command(args)
        return run_model_command(args)
    except ModuleNotFoundError as e:  # calibrate's scipy, plots' matplotlib: not in every install
        line = missing_extra(e, f"python -m model_tools {args.command}")
        if line is None:
            raise
        print(line, file=sys.stderr)
        return 2
