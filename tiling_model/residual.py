"""A device's learned residual over the realised tiling: what its measurements say beyond the hardware fit,
as factors on classes of what the kernel actually does at a size.

The knob correction (``tiling_model.correction``) prices the knobs: a block size, a BUFFER_NUM, a tile
alignment, a core count, whatever the size. A device's effects follow what those knobs make of a size:
the bytes of each copy against the DMA's burst granules, whether the last tile's copy is aligned, whether
the cores' boundaries fall on 512 B, how many tiles a core runs against its buffer count, an odd core
count. Each of those is a class of the realised tiling (``FEATURES``, each a small table of levels); the
residual is one log factor per level, fitted by ridge regression on every measurement of a sweep with
one free level per study key (a key's level is the hardware fit's business: the residual ranks a key's
configurations), its penalty chosen by held-out keys, and none at all unless it predicts held-out keys
better than no residual (noise alone fits factors of 1).

Prototype: the bench (``benchmarks/untimed_sizes.py``) scores the whole space with it; the engine, the
service and the C++ build do not read it yet.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tiling_model import engine

TILE_SIZE_CLASSES = 19  # log2 of the tile's bytes, 512 B (9) .. 256 KiB (18)
#: Tiles per core: each count to 16 its own level, then 17-24, 25-32, 33-48, 49-64, more.
TILES_BINS = (*range(1, 17), 24, 32, 48, 64)
TILES_LEVELS = len(TILES_BINS) + 1
PAGE_STEPS = 16  # a copy's bytes within an 8 KiB page, in 512-B steps
BUFFERS = 5  # BUFFER_NUM 0 .. 4
#: (name, levels): every feature a table of levels. Interactions with the buffer count are their own
#: features: how deep the pipeline is changes what a copy size or a tile count costs.
FEATURES: tuple[tuple[str, int], ...] = (
    ("buffer_num", BUFFERS),
    ("block_class", 16),
    ("cores", 65),
    ("cores_odd_x_buffers", 2 * BUFFERS),
    ("tile_align", 5),  # the tile's largest divisor among 512 B, 1, 2, 4 and 8 KiB
    ("tile_align_x_buffers", 5 * BUFFERS),
    ("tile_in_page_x_buffers", PAGE_STEPS * BUFFERS),  # the copy's bytes modulo 8 KiB
    ("tile_size", TILE_SIZE_CLASSES),
    ("tile_size_x_buffers", TILE_SIZE_CLASSES * BUFFERS),
    ("tail_align", 5),  # the slowest kind's last copy: not 32-B aligned, 32 B, 512 B, 2 KiB, 8 KiB
    ("tail_align_x_tiles", 5 * TILES_LEVELS),  # a last copy's cost is a share of a core's tiles
    ("tiles_x_buffers", TILES_LEVELS * BUFFERS),
    ("core_bounds_aligned_x_buffers", 2 * BUFFERS),  # every core's copies start 512-B aligned in GM
    ("structure", 4),  # small cores present, a distinct last core present
)
OFFSETS = tuple(int(x) for x in np.cumsum([0] + [levels for _, levels in FEATURES])[:-1])
COLUMN = {name: j for j, (name, _) in enumerate(FEATURES)}
#: What a search knows of a range of one BUFFER_NUM and core count, and of one tile of it too.
BY_BUFFERS_AND_CORES = ("buffer_num", "cores", "cores_odd_x_buffers")
BY_TILE_TOO = (*BY_BUFFERS_AND_CORES, "tile_align", "tile_align_x_buffers", "tile_in_page_x_buffers", "tile_size",
               "tile_size_x_buffers")  # fmt: skip
WIDTH = sum(levels for _, levels in FEATURES)
#: Penalties tried (times the residuals' robust variance), chosen by held-out keys.
PENALTIES = (3.0, 10.0, 30.0, 100.0, 300.0)
FOLDS = 5
MAX_LOG_FACTOR = math.log(1.5)
#: A measurement this far (in log) from its key's median and beyond 5 MADs is a disturbed one, left out
#: (the stand-in's outliers are 1.5-3x; an effect of a few per cent over quiet data is not one).
OUTLIER_LOG = math.log(1.2)


def _align_class(nbytes: np.ndarray, grains: tuple[int, ...]) -> np.ndarray:
    out = np.zeros(nbytes.shape, dtype=np.int64)
    for i, g in enumerate(grains, start=1):
        out = np.where(nbytes % g == 0, i, out)
    return out


def levels(n: int, elem: int, block: np.ndarray, bn: np.ndarray, tile: np.ndarray, cores: np.ndarray) -> np.ndarray:
    """(M, len(FEATURES)) level of each feature for M exact-scheme configurations at ``n`` elements."""
    block, bn, tile, cores = (np.asarray(a, dtype=np.int64) for a in (block, bn, tile, cores))
    k = engine.core_kinds(n, elem, block, bn, tile, cores)
    used = k.block_dim
    bnc = np.clip(bn, 0, BUFFERS - 1)
    work = np.where(k.cores > 0, k.tiles, -1)
    slowest = np.argmax(work, axis=1)  # the kind with most tiles (the first on a tie)
    rows = np.arange(len(block))
    tiles = np.maximum(k.tiles[rows, slowest], 0)
    tail_bytes = k.tail[rows, slowest] * elem
    tile_align = _align_class(tile, (1024, 2048, 4096, 8192))
    size = np.clip(np.floor(np.log2(np.maximum(tile, 1))).astype(np.int64), 0, TILE_SIZE_CLASSES - 1)
    tiles_bin = np.searchsorted(np.array(TILES_BINS), tiles, side="left")
    aligned = np.all(k.aligned | (k.cores == 0), axis=1)
    tail_align = _align_class(tail_bytes, (32, 512, 2048, 8192))
    structure = (k.cores[:, 1] > 0).astype(np.int64) * 2 + (k.cores[:, 2] > 0).astype(np.int64)
    cols = (
        bnc,
        np.clip(np.floor(np.log2(np.maximum(block, 1))).astype(np.int64), 0, 15),
        np.clip(used, 0, 64),
        (used % 2) * BUFFERS + bnc,
        tile_align,
        tile_align * BUFFERS + bnc,
        ((tile % 8192) // 512) * BUFFERS + bnc,
        size,
        size * BUFFERS + bnc,
        tail_align,
        tail_align * TILES_LEVELS + tiles_bin,
        tiles_bin * BUFFERS + bnc,
        aligned.astype(np.int64) * BUFFERS + bnc,
        structure,
    )
    return np.stack(cols, axis=1)


def design(lv: np.ndarray) -> np.ndarray:
    """One indicator column per level of every feature."""
    x = np.zeros((lv.shape[0], WIDTH))
    rows = np.arange(lv.shape[0])
    for j, off in enumerate(OFFSETS):
        x[rows, off + lv[:, j]] = 1.0
    return x


@dataclass(frozen=True)
class Residual:
    """Log factors per level of each feature (0: none), what the fit chose, and its held-out check."""

    beta: tuple[float, ...] = (0.0,) * WIDTH
    penalty: float = 0.0  # the chosen penalty (0: no residual)
    held_out_rms: float = 0.0  # held-out log error with the residual (of the chosen penalty)
    held_out_rms_none: float = 0.0  # and without

    @property
    def identity(self) -> bool:
        return not any(self.beta)

    def factors(self, lv: np.ndarray) -> np.ndarray:
        """The factor on each configuration's prediction."""
        if self.identity:
            return np.ones(lv.shape[0])
        b = np.asarray(self.beta)
        z = sum(b[off + lv[:, j]] for j, off in enumerate(OFFSETS))
        out: np.ndarray = np.exp(z)
        return out

    def floor_factors(self, lv: np.ndarray, exact: tuple[str, ...] = BY_BUFFERS_AND_CORES) -> np.ndarray:
        """Under each configuration's factor, the least one any configuration sharing its ``exact`` features
        can take (those at their level; a feature crossed with the buffer count at its least for that count
        where the buffer count is exact; every other at its least): the bound a search that knows only those
        features of a range would carry."""
        b = np.asarray(self.beta)
        z = np.zeros(lv.shape[0])
        bn = lv[:, COLUMN["buffer_num"]]
        for j, ((name, count), off) in enumerate(zip(FEATURES, OFFSETS, strict=True)):
            seg = b[off : off + count]
            if name in exact:
                z += seg[lv[:, j]]
            elif name.endswith("_x_buffers") and "buffer_num" in exact:  # levels are class * BUFFERS + buffers
                z += seg.reshape(-1, BUFFERS).min(axis=0)[bn]
            else:
                z += seg.min()
        out: np.ndarray = np.exp(z)
        return out

    def summary(self) -> dict[str, object]:
        """What was learnt: per feature the levels whose factor is off 1 by 0.5% or more, and the check."""
        learnt: dict[str, dict[str, float]] = {}
        for (name, count), off in zip(FEATURES, OFFSETS, strict=True):
            moved = {str(i): round(math.exp(self.beta[off + i]), 4) for i in range(count)
                     if abs(self.beta[off + i]) >= 0.005}  # fmt: skip
            if moved:
                learnt[name] = moved
        return {"penalty": self.penalty, "held_out_rms": round(self.held_out_rms, 5),
                "held_out_rms_none": round(self.held_out_rms_none, 5), "factors": learnt}  # fmt: skip


NONE = Residual()


def _solve(x: np.ndarray, keys: np.ndarray, y: np.ndarray, penalty: float) -> np.ndarray:
    """Ridge on the feature columns with one free (barely penalised) level per key."""
    ids, key_index = np.unique(keys, return_inverse=True)
    kx = np.zeros((len(y), ids.size))
    kx[np.arange(len(y)), key_index] = 1.0
    full = np.hstack([x, kx])
    pen = np.concatenate([np.full(x.shape[1], penalty), np.full(ids.size, 1e-6)])
    beta: np.ndarray = np.linalg.solve(full.T @ full + np.diag(pen), full.T @ y)
    return beta[: x.shape[1]]


def _held_out_sse(x: np.ndarray, keys: np.ndarray, y: np.ndarray, penalty: float | None) -> float:
    """Squared log error of each held-out key's configurations, relative to the key's own mean (the
    ranking within a key is what the residual is for), by folds of whole keys; ``None``: no residual."""
    ids = np.unique(keys)
    fold_of = {g: i % FOLDS for i, g in enumerate(ids)}
    fold = np.array([fold_of[g] for g in keys])
    sse = 0.0
    for f in range(min(FOLDS, ids.size)):
        train, test = fold != f, fold == f
        pred = (
            np.zeros(int(test.sum())) if penalty is None else x[test] @ _solve(x[train], keys[train], y[train], penalty)
        )
        r = y[test] - pred
        for g in np.unique(keys[test]):
            m = keys[test] == g
            sse += float(((r[m] - r[m].mean()) ** 2).sum())
    return sse


def fit_residual(lv: np.ndarray, keys: Sequence[str], log_residuals: Sequence[float]) -> Residual:
    """The residual that best explains ``log(measured / predicted)`` of measured configurations (their
    ``levels``, their study keys), or ``NONE`` where no penalty predicts held-out keys better than none.
    Residuals beyond both 5 MADs and ``OUTLIER_LOG`` of their key's median (a disturbed measurement) are
    left out."""
    y = np.asarray(log_residuals, dtype=float)
    g = np.asarray(keys, dtype=object)
    if y.size == 0 or np.unique(g).size < FOLDS:
        return NONE
    centred = y.copy()
    for key in np.unique(g):
        m = g == key
        centred[m] -= np.median(y[m])
    mad = 1.4826 * float(np.median(np.abs(centred)))
    keep = np.abs(centred) <= max(5 * mad, OUTLIER_LOG)
    x, y, g = design(lv[keep]), y[keep], g[keep]
    scale = max(mad * mad, 1e-6)
    none = _held_out_sse(x, g, y, None)
    tried = {p: _held_out_sse(x, g, y, p * scale) for p in PENALTIES}
    best = min(tried, key=lambda p: (tried[p], -p))
    rms = math.sqrt(tried[best] / y.size)
    rms_none = math.sqrt(none / y.size)
    if tried[best] >= none:
        return Residual(penalty=0.0, held_out_rms=rms_none, held_out_rms_none=rms_none)
    beta = np.clip(_solve(x, g, y, best * scale), -MAX_LOG_FACTOR, MAX_LOG_FACTOR)
    beta = np.where(x.any(axis=0), beta, 0.0)
    return Residual(tuple(float(b) for b in beta), best, rms, rms_none)
