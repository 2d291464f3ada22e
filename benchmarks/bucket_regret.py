"""Regret of the shipped tables on held-out sizes: the time of the bucket's tuned knobs at the
exact size over the best of the whole search space at that size (model backend, noise-free).

Run: ``make bench-regret`` (``--soc``, ``--sizes``).
"""

from __future__ import annotations

import argparse
import statistics
import sys

import numpy as np

from service.config import SHIPPED_TABLES
from tiling_model import compute_tiling, load_soc, predict
from tiling_model.kernels import bce_grad_kernel
from tiling_model.space import score_space
from tiling_model.tables import load_table


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--soc", default="Ascend910B2")
    ap.add_argument("--sizes", type=int, default=200)
    a = ap.parse_args()
    soc = load_soc(a.soc)
    table = load_table(SHIPPED_TABLES / f"{a.soc}.json")
    keys = sorted({e.key for e in table.entries})
    tuned = sorted({e.size for e in table.entries})
    rng = np.random.default_rng(7)
    regrets = []
    worst = (0.0, None)
    for i in range(a.sizes):
        dtype, reduction, weight, pw, wrt = keys[rng.integers(len(keys))]
        n = int(np.exp(rng.uniform(np.log(tuned[0]), np.log(tuned[-1]))))
        e = table.lookup(dtype, reduction, weight, n, pw, wrt)
        t = compute_tiling([n], dtype, reduction, e.tiling_params(), soc, "exact", weight, pw, wrt)
        best = float(score_space(bce_grad_kernel(dtype, reduction, weight, pw, wrt), soc, n).result.predicted_us.min())
        r = predict(t, soc) / best - 1
        regrets.append(r)
        if r > worst[0]:
            worst = (r, (dtype, reduction, weight, n, e.size))
        print(f"\r{i + 1}/{a.sizes}", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    regrets.sort()
    print(
        f"{a.soc}: {a.sizes} held-out sizes ({tuned[0]}..{tuned[-1]} elements, log-uniform, random variant keys), "
        f"table tuned at {len(tuned)} sizes"
    )
    print(
        f"regret median {100 * statistics.median(regrets):.2f}%, 95th percentile "
        f"{100 * regrets[int(0.95 * len(regrets))]:.2f}%, worst {100 * regrets[-1]:.2f}% at {worst[1]} "
        f"(dtype, reduction, weight, n, entry size)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
