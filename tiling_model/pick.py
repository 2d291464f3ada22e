"""Pick tiling parameters with the cost model: alone (no tuning table needed), or to re-fit a
tuned bucket's knobs to an exact size the table was not tuned at."""

from __future__ import annotations

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
    """The unseen-size policy: the model chooses the block size, core count and tile at the exact size
    (what depends on n: how the elements divide over cores and tiles) and, with a profile fitted on a
    device (a knob correction or a residual: ``engine.learned``), the buffer count too: the corrected model
    knows the device's buffer effects (on nine stand-in devices every buffer count left 1.1 points more
    untimed sizes within 2% on average, -2 to +4: docs/benchmarks/untimed-sizes.md). With the shipped
    profiles (the tables tuned on the model itself) the bucket's BUFFER_NUM is kept: it is already the
    model's. Falls back to ``tuned`` if no configuration is valid. (Keeping the bucket's block too left up
    to 1.9% of regret on held-out sizes: a block that divided the tuned size well can divide n badly.)"""
    t = refit_tiling([n], variant, soc, tuned, classes, weight_period)
    return TilingParams(**t.params.as_dict()) if t is not None else tuned


def refit_tiling(
    shape: list[int], variant: Variant, soc: SocProfile, tuned: TilingParams, classes: int = 1, weight_period: int = 0
) -> TilingData | None:
    """``refit`` as the validated tiling of ``shape`` itself (what the service sends), or None where no
    configuration of the buffer counts it searches validates (or the bucket's is not allowed)."""
    kernel = bce_grad_kernel(variant, "exact", classes, weight_period)
    if tuned.buffer_num is None or tuned.buffer_num not in kernel.allowed_buffer_nums():
        return None
    seed = None
    if tuned.block_bytes and tuned.tile_bytes and tuned.core_num:
        seed = (tuned.block_bytes, tuned.tile_bytes, tuned.core_num)
    buffers = None if engine.learned(soc) else (tuned.buffer_num,)
    return _fastest_valid(
        element_count(shape), variant, soc, classes, None, buffers, shape, seed, weight_period, tuned.buffer_num
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
    first_bn: int | None = None,
) -> TilingData | None:
    """The fastest configuration whose tiling (of ``shape``, default [n]) validates: the best one (found
    by the engine's re-fit across the buffer counts), else the RANKED fastest in order from the pruned
    scoring; None if none of them validates. ``seed`` (block, tile, cores) and ``first_bn`` (the buffer
    count searched first) only speed the search up."""
    kernel = bce_grad_kernel(variant, "exact", classes, weight_period)
    if shape is None:
        shape = [n] if variant.pos_weight != "last_dim" else [max(n // classes, 1), classes]
    period = weight_period or None  # compute_tiling ignores it for a form without one
    best = _best_params(kernel, soc, max(n, 1), blocks_only, buffers_only, seed, first_bn)
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
    first_bn: int | None = None,
) -> TilingParams | None:
    """``score_space(...).best_index()``'s configuration with the engine's re-fit across the buffer counts
    (``engine.refit_across``: the space's order; ``first_bn`` searched first, its best bounding the rest)."""
    slices = []
    for bn in kernel.allowed_buffer_nums(BUFFER_CHOICES):
        if buffers_only is not None and bn not in buffers_only:
            continue
        tiles = tile_choices(kernel, soc, bn)
        if tiles.size:
            slices.append((bn, int(tiles[-1])))
    slices.sort(key=lambda s: s[0] != first_bn)  # stable: the rest in ascending order
    blocks = blocks_only if blocks_only is not None else BLOCK_CHOICES
    best = engine.refit_across(kernel, soc, n, blocks, slices, seed) if slices else None
    if best is None:
        return None
    block_bytes, buffer_num, tile_bytes, core_num = best
    return TilingParams(block_bytes, buffer_num, tile_bytes, core_num)
