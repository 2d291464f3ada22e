"""Regret of the shipped tables on held-out sizes: the time of the unseen-size policy's knobs at
the exact size over the best of the whole search space at that size (model backend, noise-free),
for the service's policy (refit: bucket BUFFER_NUM, block, cores and tile re-fit by the model)
and the C++ header's (nearest: the bucket's knobs unchanged), side by side.

Run: ``make bench-regret`` (``--soc``, ``--sizes``).
"""

from __future__ import annotations

import argparse
import sys

from service.config import SHIPPED_TABLES
from tiling_model.tables import TableError, load_table
from tuner.report import held_out_regret


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--soc", default="Ascend910B2")
    ap.add_argument("--sizes", type=int, default=200)
    ap.add_argument("--table", help="a table file (default: the shipped one of --soc)")
    a = ap.parse_args()
    try:
        table = load_table(a.table or SHIPPED_TABLES / f"{a.soc}.json")
    except TableError as e:
        print(f"bucket_regret: error: {e}", file=sys.stderr)
        return 2
    sizes = sorted({e.size for e in table.entries})
    print(
        f"{a.soc}: {a.sizes} held-out sizes ({sizes[0]}..{sizes[-1]} elements, log-uniform, random variant keys), "
        f"table tuned at {len(sizes)} sizes"
    )
    for policy in ("refit", "nearest"):
        r = held_out_regret(table, a.sizes, policy=policy, progress=True)
        print(
            f"{policy:8s} regret median {100 * r.median:.2f}%, 95th percentile {100 * r.p95:.2f}%, "
            f"worst {100 * r.worst:.2f}% ({r.worst_case})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
