"""Pick tiling parameters with the cost model: alone (no tuning table needed), or to re-fit a
tuned bucket's knobs to an exact size the table was not tuned at."""

from __future__ import annotations

import numpy as np

from tiling_model import engine
from tiling_model.errors import InvalidTiling
from tiling_model.kernels import ElementwiseKernel, bce_grad_kernel
from tiling_model.soc import SocProfile
from tiling_model.space import BLOCK_CHOICES, BUFFER_CHOICES, score_space, tile_choices
from tiling_model.tiling import TilingData, TilingParams, compute_tiling, element_count
from tiling_model.validate import validate
from tiling_model.variant import Variant

RANKED = 16  # configurations tried, fastest first, when the fastest does not validate


def model_best(n: int, variant: Variant, soc: SocProfile, classes: int = 1, weight_period: int = 0) -> TilingData:
    """The model's fastest valid exact-scheme tiling over the whole search space (``weight_period``: a
    last-dim or rows weight's P or R)."""
    t = _fastest_valid(n, variant, soc, classes, None, None, weight_period=weight_period)
    if t is None:
        raise InvalidTiling(f"no valid tiling in the model's space for n={n} {variant.label()} on {soc.name}")
    return t


def refit(
    n: int, variant: Variant, soc: SocProfile, tuned: TilingParams, classes: int = 1, weight_period: int = 0
) -> TilingParams:
    """The unseen-size policy: keep a bucket's tuned BUFFER_NUM (the pipeline depth: what was measured
    to suit the hardware), let the model choose the block size, core count and tile at the exact size
    (what depends on n: how the elements divide over cores and tiles). Falls back to ``tuned`` if no
    configuration of that buffer count is valid. (Keeping the bucket's block too left up to 1.9% of
    regret on held-out sizes: a block that divided the tuned size well can divide n badly.)"""
    t = refit_tiling([n], variant, soc, tuned, classes, weight_period)
    return TilingParams(**t.params.as_dict()) if t is not None else tuned


def refit_tiling(
    shape: list[int], variant: Variant, soc: SocProfile, tuned: TilingParams, classes: int = 1, weight_period: int = 0
) -> TilingData | None:
    """``refit`` as the validated tiling of ``shape`` itself (what the service sends), or None where no
    configuration of the bucket's buffer count validates."""
    kernel = bce_grad_kernel(variant, "exact", classes, weight_period)
    if tuned.buffer_num is None or tuned.buffer_num not in kernel.allowed_buffer_nums():
        return None
    seed = None
    if tuned.block_bytes and tuned.tile_bytes and tuned.core_num:
        seed = (tuned.block_bytes, tuned.tile_bytes, tuned.core_num)
    return _fastest_valid(
        element_count(shape), variant, soc, classes, None, (tuned.buffer_num,), shape, seed, weight_period
    )


def _fastest_valid(
    n: int,
    variant: Variant,
    soc: SocProfile,
    classes: int,
    blocks_only: tuple[int, ...] | None,
    buffers_only: tuple[int, ...] | None,
    shape: list[int] | None = None,
    seed: tuple[int, int, int] | None = None,
    weight_period: int = 0,
) -> TilingData | None:
    """The fastest configuration whose tiling (of ``shape``, default [n]) validates: the best one (found
    by the engine's re-fit, one buffer count at a time), else the RANKED fastest in order from the
    pruned scoring; None if none of them validates. ``seed`` (block, tile, cores) only speeds
    the search up."""
    kernel = bce_grad_kernel(variant, "exact", classes, weight_period)
    if shape is None:
        shape = [n] if variant.pos_weight != "last_dim" else [max(n // classes, 1), classes]
    period = weight_period or None  # compute_tiling ignores it for a form without one
    best = _best_params(kernel, soc, max(n, 1), blocks_only, buffers_only, seed)
    if best is None:
        return None
    t = compute_tiling(shape, variant, best, soc, "exact", period)
    if not validate(t, soc):
        return t
    scored = score_space(kernel, soc, max(n, 1), blocks_only=blocks_only, buffers_only=buffers_only, top=RANKED)
    for i in scored.ranked(RANKED):
        t = compute_tiling(shape, variant, scored.params(i), soc, "exact", period)
        if not validate(t, soc):
            return t
    return None


def _best_params(
    kernel: ElementwiseKernel,
    soc: SocProfile,
    n: int,
    blocks_only: tuple[int, ...] | None,
    buffers_only: tuple[int, ...] | None,
    seed: tuple[int, int, int] | None = None,
) -> TilingParams | None:
    """``score_space(...).best_index()``'s configuration with the engine's re-fit: each buffer count's
    best over the blocks, then the space's order across buffer counts (``engine.best_index``)."""
    picks: list[tuple[float, int, int, int, int]] = []  # (us, block, bn, tile, cores)
    for bn in kernel.allowed_buffer_nums(BUFFER_CHOICES):
        if buffers_only is not None and bn not in buffers_only:
            continue
        tiles = tile_choices(kernel, soc, bn)
        if not tiles.size:
            continue
        top = int(tiles[-1])
        blocks = blocks_only if blocks_only is not None else BLOCK_CHOICES
        c = engine.refit(kernel, soc, n, blocks, bn, top, seed)
        picks.append((c.us, c.block_bytes, bn, c.tile_bytes, c.core_num))
    if not picks:
        return None
    columns = [np.array(column) for column in zip(*picks, strict=True)]  # us, block, bn, tile, cores
    _, block_bytes, buffer_num, tile_bytes, core_num = picks[engine.best_index(*columns)]
    return TilingParams(block_bytes, buffer_num, tile_bytes, core_num)
