"""``python -m model_tools tiling ...``: print a tiling, its per-core plan, violations and time."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from model_tools.cli.args import (
    L2_CHOICES,
    L2_HELP,
    SubParsers,
    knob_flags,
    l2_state,
    parse_shape,
    variant_flags,
    weight_of,
)
from tiling_model.cost import predict_detail
from tiling_model.dtypes import DTYPES, REDUCTIONS
from tiling_model.errors import BadRequest, InvalidTiling
from tiling_model.kernels import SCHEMES
from tiling_model.model_types import DEFAULT_L2, L2State
from tiling_model.plan import core_plan
from tiling_model.resolve import Request, Resolver, load_tables, shipped_tables_dir
from tiling_model.soc import SocProfile, known_socs
from tiling_model.tiling import TilingData, TilingParams, compute_tiling
from tiling_model.validate import validate
from tiling_model.variant import Variant


def add_tiling_command(sub: SubParsers) -> None:
    t = sub.add_parser("tiling", help="compute, check and time one tiling")
    t.add_argument("--soc", default="Ascend910B2", help=f"one of {', '.join(known_socs())}")
    t.add_argument("--shape", type=parse_shape, required=True, help="dims, e.g. 1024,1024")
    t.add_argument("--dtype", required=True, choices=DTYPES)
    t.add_argument("--reduction", default="none", choices=REDUCTIONS)
    t.add_argument("--scheme", default="exact", choices=SCHEMES)
    variant_flags(t)
    knob_flags(t)
    t.add_argument(
        "--knobs",
        default="tuned",
        choices=("tuned", "seed"),
        help="tuned (default): what POST /tiling answers (the tables, the re-fit between their sizes, the model "
        "where none applies), the knob flags over it; seed: the seed default (block 512, 2 buffers, the largest "
        "tile, all cores), the knob flags over it",
    )
    t.add_argument("--tables", type=Path, help="tables directory for --knobs tuned (default: the shipped tables)")
    t.add_argument("--l2", choices=L2_CHOICES, default="cold", help=L2_HELP)
    t.add_argument("--json", action="store_true", help="machine-readable output")
    t.add_argument("--max-cores", type=int, default=8, help="cores listed in the text summary")
    t.add_argument(
        "--plot",
        metavar="DIR",
        help="also draw the explorer's pictures (core map, UB plan, pipeline timeline, landscape) as PNG and SVG",
    )


def tiling_report(t: TilingData, l2: L2State = DEFAULT_L2, soc: SocProfile | None = None) -> dict[str, object]:
    """The JSON document of ``--json`` (also what tests and scripts read); ``soc``: the profile that
    predicts it (a device-tuned table's), default the shipped one."""
    pred = predict_detail(t, soc, l2=l2)
    return {
        "soc": t.soc,
        "scheme": t.scheme,
        "params": t.params.as_dict(),
        "tiling": t.field_dict(),
        "block_dim": t.block_dim,
        "tiling_key": t.tiling_key,
        "violations": [v.as_dict() for v in validate(t, soc)],
        **pred.as_dict(),
        "cores": [
            {
                "core": c.index,
                "kind": c.kind,
                "first": c.start,
                "last": c.end - 1,
                "tiles": c.tiles,
                "tail": c.tail_elems,
            }
            for c in core_plan(t)
        ],
    }


def _print_text(rep: dict[str, Any], max_cores: int) -> None:
    p = rep["params"]
    print(
        f"{rep['soc']}  scheme={rep['scheme']}  block_bytes={p['block_bytes']} buffer_num={p['buffer_num']} "
        f"tile_bytes={p['tile_bytes']} core_num={p['core_num']}"
    )
    print(f"block_dim={rep['block_dim']}  tiling_key={rep['tiling_key']}")
    print("tiling:")
    for k, v in rep["tiling"].items():
        print(f"  {k:<20} {v}")
    cores = rep["cores"]
    print(f"cores ({len(cores)}):")
    shown = cores if len(cores) <= max_cores else cores[: max_cores - 1] + [cores[-1]]
    for i, c in enumerate(shown):
        if len(cores) > max_cores and i == max_cores - 1:
            print(f"  ... {len(cores) - max_cores} more")
        span = f"elements {c['first']}..{c['last']}"
        print(f"  core {c['core']:>3} {c['kind']:<5} {span}  tiles {c['tiles']}  tail {c['tail']}")
    if rep["violations"]:
        print(f"violations ({len(rep['violations'])}):")
        for v in rep["violations"]:
            print(f"  {v['kind']}: {v['message']}")
    else:
        print("violations: none")
    print(
        f"predicted: {rep['predicted_us']:.3f} us ({rep['bottleneck']}-bound, {rep['bytes_moved']} B moved, "
        f"roofline {rep['roofline_us']:.3f} us, {100 * rep['fraction_of_roofline']:.1f}% of it)"
    )


def run_tiling_command(args: argparse.Namespace) -> int:
    params = TilingParams(args.block_bytes, args.buffer_num, args.tile_bytes, args.core_num)
    soc = None
    try:
        w = weight_of(args)
        variant = Variant(args.dtype, args.reduction, w.form, args.pos_weight, args.wrt, args.mode)
        if args.knobs == "tuned" and args.scheme == "exact":  # POST /tiling's answer
            resolver = Resolver(load_tables(args.tables or shipped_tables_dir()))
            given = tuple((k, v) for k, v in params.as_dict().items() if v is not None)
            request = Request(args.soc, tuple(args.shape), variant, given, w.period)
            try:
                r = resolver.resolve(request)
                t, soc = r.tiling, r.profile
            except InvalidTiling as e:  # shown with its violations (POST /tiling refuses it: a 422)
                if not e.violations:
                    raise
                print(f"python -m model_tools: note: POST /tiling refuses these knobs: {e}", file=sys.stderr)
                tuned = resolver.tuned(request)
                merged = TilingParams(**(tuned.tiling.params.as_dict() | dict(given)))
                t, soc = (
                    compute_tiling(args.shape, variant, merged, tuned.profile, "exact", w.period or None),
                    tuned.profile,
                )
        else:
            t = compute_tiling(args.shape, variant, params, args.soc, args.scheme, w.period or None)
    except (BadRequest, InvalidTiling) as e:
        print(f"python -m model_tools: error: {e}", file=sys.stderr)
        return 2
    rep = tiling_report(t, l2_state(args.l2), soc)
    if args.json:
        json.dump(rep, sys.stdout, indent=2)
        print()
    else:
        _print_text(rep, args.max_cores)
    if args.plot:
        from model_tools.explain import explain
        from model_tools.explorer_plot import write_all

        try:
            paths = write_all(explain(t, soc), args.plot)
        except OSError as e:
            print(f"python -m model_tools: error: cannot write the pictures to {args.plot}: {e}", file=sys.stderr)
            return 2
        print(f"pictures: {', '.join(str(p) for p in paths)}", file=sys.stderr if args.json else sys.stdout)
    return 0
