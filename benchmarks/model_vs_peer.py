"""Our cost model against CANN's own (the autofuse auto-tiling model, ``model_tools.autofuse_peer``), side by
side on the same measured calls: the 120 primary cases of ``data/calibration`` (seven operators on the
Ascend910B2, Huawei's kernels), per operator and traffic class.

Columns: ours with the shipped profile (fitted on these cases: in sample), ours leave-one-operator-out
(each operator predicted by a fit on the other six: the figure for an operator the fit has not seen),
and CANN's model with its published constants (fitted by Huawei on its own micro-benchmarks, never on
these cases: held out by construction). Both models time the same tiling of each launch (the model's
default tiling; the peer's assumptions are in its module docstring). Cells: median |predicted /
measured - 1|, p90 in brackets, then the median signed error (bias; negative: too fast).

Run: ``make bench-model`` (or ``.venv/bin/python benchmarks/model_vs_peer.py [--json]``); about 40 s
(the leave-one-operator-out fits).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from model_tools import autofuse_peer
from model_tools.calibrate import errors, report
from model_tools.crossval import calibrate_all, in_sample_ceiling, read_all
from tiling_model import load_soc

DATA = Path(__file__).resolve().parent.parent / "data" / "calibration"
SOC = "Ascend910B2"


def reports(vector_start_cycles: float | None = None) -> dict[str, dict[str, Any]]:
    """The three reports; ``vector_start_cycles`` (a candidate profile value, not the shipped one) goes
    into the held-out fit's profile and is named in its column."""
    soc = load_soc(SOC)
    cases = read_all(DATA, soc)
    base = soc if vector_start_cycles is None else replace(soc, vector_start_cycles=vector_start_cycles)
    cal = calibrate_all(DATA, base)
    assert cal.held_out is not None
    held = read_all(DATA, cal.measured)  # the same calls as the fit read them (vector factor 1)
    held_name = "ours, held out" if vector_start_cycles is None else f"ours held out, vs {vector_start_cycles:g}"
    return {
        "ours, shipped profile": report(cases, errors(cases, soc)),
        held_name: report(cal.cases, cal.held_out),
        "CANN autofuse": report(held, autofuse_peer.errors(held, soc)),
    }


def _cell(s: dict[str, Any]) -> str:
    return f"{100 * s['median']:5.1f}% ({100 * s['p90']:5.1f}%) {100 * s['bias']:+6.1f}%"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true", help="the three reports as JSON")
    ap.add_argument(
        "--vector-start-cycles",
        type=float,
        help="fit and hold out with this vector start-up per instruction (cycles; shipped: the profile's 2)",
    )
    ap.add_argument("--ceiling", action="store_true",
                    help="also fit every operator in sample (robust and plain least squares): the best these "
                         "parameters reach on the cases they are scored on (a few seconds)")  # fmt: skip
    a = ap.parse_args()
    r = reports(a.vector_start_cycles)
    ceil = in_sample_ceiling(DATA, load_soc(SOC)) if a.ceiling else None
    if a.json:
        print(json.dumps(r | ({"in-sample ceiling": ceil} if ceil else {}), indent=2))
        return 0
    models = list(r)
    first = r[models[0]]
    rows = [("all", "overall", None)]
    rows += [(op, "by_operator", op) for op in first["by_operator"]]
    rows += [(c, "by_traffic", c) for c in first["by_traffic"] if first["by_traffic"][c]["cases"]]
    print(f"{SOC}: {first['overall']['cases']} primary measured calls from {DATA.relative_to(DATA.parents[1])}")
    print("median |error| (p90) bias, per model\n")
    print(f"{'':14}{'cases':>6}  " + "  ".join(f"{m:<28}" for m in models))
    for label, group, key in rows:
        stats = [r[m][group] if key is None else r[m][group][key] for m in models]
        print(f"{label:14}{stats[0]['cases']:>6}  " + "  ".join(f"{_cell(s):<28}" for s in stats))
    ours, peer = r[models[1]]["by_operator"], r["CANN autofuse"]["by_operator"]
    wins = [op for op in ours if peer[op]["median"] < ours[op]["median"]]
    print(f"\nCANN's model closer than ours held out (median): {', '.join(wins) or 'nowhere'}")
    if ceil:
        print("\nin-sample ceiling: fitted on all seven operators and scored on them (median |error|, p90)")
        for c in ceil:
            cell = f"{100 * c['median']:5.1f}% ({100 * c['p90']:5.1f}%)"
            print(f"  loss {c['loss']:<7} {c['free']:<8} parameters free: {cell}")
    return 0 if np.isfinite(first["overall"]["median"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
