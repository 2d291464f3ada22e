"""Pick good tiling parameters with the cost model alone (no tuning table needed).

A coarse grid over the four knobs, every point validated, the fastest valid one returned.
The service falls back to this for shapes or variants no table covers.
"""

from __future__ import annotations

from tiling_model.cost import predict
from tiling_model.layout import MAX_BUFFERS_PER_POSITION, kernel_layout
from tiling_model.soc import SocProfile
from tiling_model.tiling import TilingData, TilingParams, compute_tiling
from tiling_model.validate import validate

GRID_BLOCKS = (512, 2048, 8192)
GRID_TILE_FRACTIONS = (0.25, 0.5, 1.0)
GRID_CORE_FRACTIONS = (0.25, 0.5, 1.0)


def model_best(n: int, dtype: str, reduction: str, weight: bool, soc: SocProfile) -> TilingData:
    """The fastest valid exact-scheme tiling on the grid, by the cost model.

    Ties go to the seed-default knobs' order of the grid (block, buffers, tile, cores), so
    the answer is deterministic.
    """
    layout = kernel_layout(dtype, reduction, weight, "exact")
    worst = max(layout.vecin_queues, layout.vecout_queues)
    buffers = [b for b in (2, 1, 3, 4) if worst * b <= MAX_BUFFERS_PER_POSITION]
    cores = sorted({max(1, int(soc.aiv_cores * f)) for f in GRID_CORE_FRACTIONS}, reverse=True)
    best: tuple[float, TilingData] | None = None
    for bn in buffers:
        top = layout.max_tile_bytes(soc.ub_usable_bytes, bn)
        tiles = sorted({max(512, int(top * f) // 512 * 512) for f in GRID_TILE_FRACTIONS if top >= 512}, reverse=True)
        for block in GRID_BLOCKS:
            for tile in tiles or [top]:
                for c in cores:
                    t = compute_tiling([n], dtype, reduction, TilingParams(block, bn, tile, c), soc, "exact", weight)
                    if validate(t, soc):
                        continue
                    us = predict(t, soc)
                    if best is None or us < best[0] - 1e-9:
                        best = (us, t)
    if best is None:
        raise RuntimeError(f"no valid tiling on the model grid for n={n} {dtype}/{reduction} on {soc.name}")
    return best[1]
