"""Regret of the shipped tables on held-out sizes, by SoC: the predicted time of a policy's knobs at the
exact size over the best of the whole search space at that size (model backend, noise-free), for

- ``service``: what ``POST /tiling`` answers (the bucket's BUFFER_NUM, as the shipped tables are not
  device-fitted; block, cores and tile re-fit by the model at the exact size: ``tiling_model.pick.refit``),
- ``build``: what the CANN build's TilingFunc does (``bce_grad::TunedKnobs``, the C++ header, run
  through ``kernel.host_tiling``; it should equal ``service``: the parity test says so),
- ``nearest``: the bucket's knobs unchanged (what the C++ header did before it re-fit).

Held-out sizes: log-uniform over each table's tuned range, random tuned variant keys, a fixed seed. The
keys are BinaryCrossEntropyGrad's by default; ``--mode fused`` takes the fused BCEWithLogits mode's (the
CANN build tiles it as BceWithLogitsFused's TilingFunc). Run: ``make bench-regret`` (``--soc``, ``--sizes``,
``--mode``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import dataclass

import numpy as np

from kernel.host_tiling import query_host_tiling
from service.config import SHIPPED_TABLES
from tiling_model import BuildError, TilingParams, Variant, compute_tiling, known_socs, load_soc, predict
from tiling_model.kernels import bce_grad_kernel
from tiling_model.pick import refit
from tiling_model.space import score_space
from tiling_model.tables import TableError, TuningTable, load_table, variant_order

POLICIES = ("service", "build", "nearest")


@dataclass(frozen=True)
class Row:
    policy: str
    median: float
    p95: float
    worst: float
    worst_case: str


def regret_by_policy(table: TuningTable, count: int, seed: int = 7, mode: str = "grad") -> list[Row]:
    soc = load_soc(table.soc)
    variants = sorted({e.variant for e in table.entries if e.variant.mode == mode}, key=variant_order)
    if not variants:
        return []
    policies = POLICIES
    sizes = sorted({e.size for e in table.entries})
    rng = np.random.default_rng(seed)
    calls: list[tuple[Variant, int]] = []
    for _ in range(count):
        v = variants[rng.integers(len(variants))]
        calls.append((v, int(np.exp(rng.uniform(np.log(sizes[0]), np.log(sizes[-1]))))))
    built = query_host_tiling([(table.soc, v, n) for v, n in calls]) if "build" in policies else [None] * len(calls)
    out: dict[str, list[tuple[float, str]]] = {p: [] for p in policies}
    for (v, n), b in zip(calls, built, strict=True):
        e = table.lookup(v, n)
        assert e is not None
        tuned = e.tiling_params()
        knobs = {"service": tuned if e.size == n else refit(n, v, soc, tuned)}
        if b is not None:
            knobs |= {"build": b.params, "nearest": tuned}
        best = float(score_space(bce_grad_kernel(v, classes=1), soc, n).result.predicted_us.min())
        for policy, p in knobs.items():
            us = predict(compute_tiling([n], v, TilingParams(**p.as_dict()), soc), soc)
            out[policy].append((us / best - 1, f"{v.label()} at n={n} (entry tuned at {e.size})"))
    rows = []
    for policy in policies:
        values = sorted(out[policy])
        rs = [r for r, _ in values]
        case = values[-1][1] if rs[-1] > 0 else "-"
        name = policy if mode == "grad" else f"{policy}/{mode}"
        rows.append(Row(name, statistics.median(rs), rs[int(0.95 * (len(rs) - 1))], rs[-1], case))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--soc", action="append", help="a SoC (repeatable; default: every SoC with a shipped table)")
    ap.add_argument("--sizes", type=int, default=1000, help="held-out sizes per SoC (default 1000)")
    ap.add_argument("--mode", choices=("grad", "fused"), default="grad", help="the kernel mode's keys (default grad)")
    a = ap.parse_args()
    if a.sizes < 1:
        print("bucket_regret: error: --sizes must be at least 1", file=sys.stderr)
        return 2
    socs = a.soc or [s for s in known_socs() if (SHIPPED_TABLES / f"{s}.json").is_file()]
    width = 8 if a.mode == "grad" else 13  # "nearest/fused"
    print(f"{a.sizes} held-out sizes per SoC (log-uniform over the tuned range, random variant keys, seed 7)")
    print(f"{'SoC':12s} {'policy':{width}s} {'median':>8s} {'p95':>8s} {'worst':>8s}  worst case")
    for soc in socs:
        try:
            table = load_table(SHIPPED_TABLES / f"{soc}.json")
            rows = regret_by_policy(table, a.sizes, mode=a.mode)
        except (TableError, BuildError) as e:
            print(f"bucket_regret: error: {e}", file=sys.stderr)
            return 2
        for r in rows:
            figures = f"{100 * r.median:7.2f}% {100 * r.p95:7.2f}% {100 * r.worst:7.2f}%"
            print(f"{soc:12s} {r.policy:{width}s} {figures}  {r.worst_case}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
