"""The search space of the four tiling knobs, and scoring all of it at once with the model.

The tuner samples this space; ``score_space`` predicts every configuration in it for one
shape with the engine (the model's best is the tuner's first trials and the service's fallback).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tiling_model import _engine, engine
from tiling_model.kernels import ElementwiseKernel
from tiling_model.model_types import DEFAULT_L2, PRUNE_MARGIN_US, PRUNE_RELATIVE, BatchResult, L2State
from tiling_model.soc import SocProfile
from tiling_model.tiling import TilingParams

BLOCK_CHOICES = (32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
BUFFER_CHOICES = (1, 2, 3, 4)
TILE_STEP_BYTES: int = _engine.TILE_STEP_BYTES  # tiles are whole 512-B blocks (GM-aligned copies)
PRUNE_CHUNK = 8  # configurations simulated in the first round of a pruned scoring


@dataclass(frozen=True)
class ScoredSpace:
    block_bytes: np.ndarray
    buffer_num: np.ndarray
    tile_bytes: np.ndarray
    core_num: np.ndarray
    result: BatchResult

    def __len__(self) -> int:
        return int(self.block_bytes.shape[0])

    def params(self, i: int) -> TilingParams:
        return TilingParams(
            int(self.block_bytes[i]), int(self.buffer_num[i]), int(self.tile_bytes[i]), int(self.core_num[i])
        )

    def best_index(self) -> int:
        """Fastest configuration; ties (predictions equal to 1e-9 us) go to buffers >= 2 first, then fewer
        buffers, larger tiles, more cores, larger blocks: the engine's order (``ConfigBefore``), the one the
        re-fit and the build break ties by."""
        return engine.best_index(self.result.predicted_us, self.block_bytes, self.buffer_num, self.tile_bytes,
                                 self.core_num)  # fmt: skip

    def ranked(self, k: int) -> list[int]:
        """Indices of the k fastest distinct configurations."""
        return [int(i) for i in np.argsort(self.result.predicted_us, kind="stable")[:k]]


def tile_choices(kernel: ElementwiseKernel, soc: SocProfile, buffer_num: int) -> np.ndarray:
    top = kernel.max_tile_bytes(soc.ub_usable_bytes, buffer_num)
    return np.arange(TILE_STEP_BYTES, top + 1, TILE_STEP_BYTES)


def enumerate_space(
    kernel: ElementwiseKernel,
    soc: SocProfile,
    n: int,
    blocks_only: tuple[int, ...] | None = None,
    buffers_only: tuple[int, ...] | None = None,
) -> tuple[np.ndarray, ...]:
    """Every valid (block, buffers, tile, cores) of the space, optionally for some block sizes and
    buffer counts only; cores beyond the block count are left out (same tiling as the block count)."""
    cols: list[list[np.ndarray]] = [[], [], [], []]
    for bn in kernel.allowed_buffer_nums(BUFFER_CHOICES):
        if buffers_only is not None and bn not in buffers_only:
            continue
        tiles = tile_choices(kernel, soc, bn)
        for block in blocks_only if blocks_only is not None else BLOCK_CHOICES:
            cores = np.arange(1, _engine.space_cores(n, kernel.elem_bytes, block, soc.aiv_cores) + 1)
            t, c = np.meshgrid(tiles, cores, indexing="ij")
            cols[0].append(np.full(t.size, block))
            cols[1].append(np.full(t.size, bn))
            cols[2].append(t.ravel())
            cols[3].append(c.ravel())
    return tuple(np.concatenate(c).astype(np.int64) for c in cols)


def score_space(
    kernel: ElementwiseKernel,
    soc: SocProfile,
    n: int,
    l2: L2State = DEFAULT_L2,
    blocks_only: tuple[int, ...] | None = None,
    buffers_only: tuple[int, ...] | None = None,
    top: int | None = None,
) -> ScoredSpace:
    """Predict every configuration of the space (or of the given blocks and buffer counts) for
    ``n`` elements (exact scheme).

    With ``top``, only what can be among the ``top`` fastest is simulated: every configuration gets
    the simulator's cheap lower bound, the lowest bounds are simulated first, and simulation goes on
    until no configuration left has a bound below the ``top``-th fastest found (ties included). The
    returned space holds those configurations only; its ``best_index`` and ``ranked(top)`` are the
    full space's (tests/tiling_model/test_tiling_properties.py compares them). Only ``predicted_us`` is filled then
    (the other result fields are NaN): what ranking needs, nothing more."""
    block, bn, tile, cores = enumerate_space(kernel, soc, n, blocks_only, buffers_only)
    if top is None:
        return ScoredSpace(block, bn, tile, cores, engine.score(kernel, soc, n, block, bn, tile, cores, l2))
    bound, certain = engine.bound(kernel, soc, n, block, bn, tile, cores, l2)
    order = np.argsort(bound, kind="stable")
    picked = order[: max(top, PRUNE_CHUNK)]
    predicted = np.where(certain, bound, np.nan)
    done = certain.copy()
    while True:
        rows = picked[~done[picked]]
        if rows.size:
            predicted[rows] = engine.score(
                kernel, soc, n, block[rows], bn[rows], tile[rows], cores[rows], l2
            ).predicted_us
            done[rows] = True
        found = np.sort(predicted[done])
        threshold = found[min(top, found.size) - 1] * (1 + PRUNE_RELATIVE) + PRUNE_MARGIN_US
        picked = np.nonzero(bound <= threshold)[0]
        if done[picked].all():
            break
    idx = picked  # ascending: the space's own order, so equal predictions rank as in the full space
    nan = np.full(idx.shape, np.nan)
    result = BatchResult(predicted[idx], nan, nan, np.full((idx.size, 3), np.nan), nan, nan)
    return ScoredSpace(block[idx], bn[idx], tile[idx], cores[idx], result)
