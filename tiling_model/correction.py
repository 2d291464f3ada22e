"""A device's knob correction: what its measurements of bcetune's kernel say that the hardware parameters
cannot express, as a factor on the prediction per knob class.

A device may stream some block sizes, pipeline depths, tile alignments or core counts better or worse
than the simulator's DMA curves and bandwidths say (bank and burst effects, queue overheads, how the
vector cores pair on their AI cores). Such effects are shared by every size and variant timed on that
device, so a sweep learns them from all its keys at once: log(measured / predicted) is fitted as a sum of
one term per block size class, per BUFFER_NUM, per tile alignment class and per count of cores that run,
by ridge regression (every term is pulled towards 0, a factor of 1, until the data says otherwise). The
engine multiplies a configuration's prediction of bcetune's kernel by ``factor(block, buffer_num, tile,
cores)``; other kernels (the calibration's operators) are not corrected.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

BLOCK_CLASSES = 16  # block size classes: the power of two at or below the block, 1 B .. 32 KiB
BUFFER_CLASSES = 5  # BUFFER_NUM 0 .. 4
ALIGN_CLASSES = 4  # a tile's largest divisor among 512 B, 1 KiB, 2 KiB, 4 KiB (0: below 512 B)
CORE_CLASSES = 65  # cores that run, 0 .. 64
GM_ALIGN_BYTES = 512
#: The ridge penalty on each log factor, in units of the residuals' variance: with ~0.03 of noise in
#: log time, a class needs a handful of consistent measurements before its factor moves by the effect
#: (3: chosen on the stand-in device of bench-search, where 8 learnt too slowly and 1 overfitted; a
#: penalty chosen per fit by held-out error, with an intercept, was measured worse there: 0.55% / 89% of
#: keys within 2% at 20 trials against 0.40-0.44% / 90-93%).
RIDGE = 3.0
#: Folds of the held-out check that a correction predicts better than none (of keys where there are as
#: many, else of rows).
CHECK_FOLDS = 5
#: A factor stays within this of 1 (what a knob class could plausibly do on its own).
MAX_LOG_FACTOR = math.log(1.5)


def block_class(block_bytes: int) -> int:
    """The power of two at or below the block, as its exponent (bce_grad_cost_model.h BlockClass)."""
    return min(max(int(block_bytes), 1).bit_length() - 1, BLOCK_CLASSES - 1)


def align_class(tile_bytes: int) -> int:
    """The tile's largest divisor among 512 B, 1, 2 and 4 KiB, as 0..3 (AlignClass)."""
    c = 0
    while c + 1 < ALIGN_CLASSES and tile_bytes % (GM_ALIGN_BYTES << (c + 1)) == 0:
        c += 1
    return c


def block_classes(block_bytes: np.ndarray) -> np.ndarray:
    """``block_class`` of every block (int64): what a search's whole space is classed by, without a loop."""
    b = np.maximum(np.asarray(block_bytes, dtype=np.int64), 1)
    exps: np.ndarray = np.frexp(b.astype(np.float64))[1].astype(np.int64) - 1  # floor(log2(b)), exact below 2**53
    out: np.ndarray = np.minimum(exps, BLOCK_CLASSES - 1)
    return out


def align_classes(tile_bytes: np.ndarray) -> np.ndarray:
    """``align_class`` of every tile (int64)."""
    t = np.asarray(tile_bytes, dtype=np.int64)
    c = np.zeros(t.shape, dtype=np.int64)
    for k in range(1, ALIGN_CLASSES):  # each grain divides the tile only if the one below does
        c += (t % (GM_ALIGN_BYTES << k) == 0) & (c == k - 1)
    return c


def buffer_class(buffer_num: int) -> int:
    return min(max(int(buffer_num), 0), BUFFER_CLASSES - 1)


def core_class(cores: int) -> int:
    return min(max(int(cores), 0), CORE_CLASSES - 1)


@dataclass(frozen=True)
class KnobCorrection:
    """Factors on a prediction: by block size class, by BUFFER_NUM, by tile alignment class, by cores."""

    block: tuple[float, ...] = (1.0,) * BLOCK_CLASSES
    buffer: tuple[float, ...] = (1.0,) * BUFFER_CLASSES
    align: tuple[float, ...] = (1.0,) * ALIGN_CLASSES
    cores: tuple[float, ...] = (1.0,) * CORE_CLASSES

    def __post_init__(self) -> None:
        for name, values, size in (
            ("block", self.block, BLOCK_CLASSES),
            ("buffer", self.buffer, BUFFER_CLASSES),
            ("align", self.align, ALIGN_CLASSES),
            ("cores", self.cores, CORE_CLASSES),
        ):
            if len(values) != size or not all(math.isfinite(f) and f > 0 for f in values):
                raise ValueError(f"knob correction {name!r} needs {size} positive factors, got {list(values)}")

    @property
    def identity(self) -> bool:
        """Every factor 1 (the core-count ones too: a correction of core counts alone is one)."""
        return all(f == 1.0 for f in (*self.block, *self.buffer, *self.align, *self.cores))

    def factor(self, block_bytes: int, buffer_num: int, tile_bytes: int, cores: int) -> float:
        """The correction of one configuration (``cores``: the cores that run), multiplied as the engine
        multiplies it."""
        return (
            self.block[block_class(block_bytes)]
            * self.buffer[buffer_class(buffer_num)]
            * self.align[align_class(tile_bytes)]
            * self.cores[core_class(cores)]
        )

    def to_json(self) -> dict[str, list[float]]:
        """Every factor, the core counts' too (a table or profile carries the whole fit)."""
        return {"block": list(self.block), "buffer": list(self.buffer), "align": list(self.align),
                "cores": list(self.cores)}  # fmt: skip

    @classmethod
    def from_json(cls, doc: Any) -> KnobCorrection:
        """``to_json``'s document; one written before core counts were kept (no "cores") has factors of 1
        for them, which is what it meant."""
        if not isinstance(doc, dict) or set(doc) - {"cores"} != {"block", "buffer", "align"}:
            raise ValueError("knob_correction must be an object with block, buffer, align (and cores) factor lists")
        cores = tuple(map(float, doc["cores"])) if "cores" in doc else (1.0,) * CORE_CLASSES
        return cls(tuple(map(float, doc["block"])), tuple(map(float, doc["buffer"])), tuple(map(float, doc["align"])),
                   cores)  # fmt: skip

    def summary(self) -> dict[str, dict[str, float]]:
        """The factors that are not 1, by what they apply to (block bytes, buffers, alignment bytes)."""
        out: dict[str, dict[str, float]] = {"block_bytes": {}, "buffer_num": {}, "tile_alignment": {}, "cores": {}}
        for c, f in enumerate(self.block):
            if f != 1.0:
                out["block_bytes"][str(1 << c)] = round(f, 4)
        for c, f in enumerate(self.buffer):
            if f != 1.0:
                out["buffer_num"][str(c)] = round(f, 4)
        for c, f in enumerate(self.align):
            if f != 1.0:
                out["tile_alignment"][str(GM_ALIGN_BYTES << c)] = round(f, 4)
        for c, f in enumerate(self.cores):
            if f != 1.0:
                out["cores"][str(c)] = round(f, 4)
        return out


IDENTITY = KnobCorrection()


def _design(configs: Sequence[tuple[int, int, int, int]]) -> np.ndarray:
    """One indicator column per class of each knob (block, buffers, alignment, cores), rows as configs."""
    x = np.zeros((len(configs), _OFFSETS[-1] + CORE_CLASSES))
    for i, (block, bn, tile, cores) in enumerate(configs):
        for off, cls in zip(
            _OFFSETS, (block_class(block), buffer_class(bn), align_class(tile), core_class(cores)), strict=True
        ):
            x[i, off + cls] = 1.0
    return x


_OFFSETS = (0, BLOCK_CLASSES, BLOCK_CLASSES + BUFFER_CLASSES, BLOCK_CLASSES + BUFFER_CLASSES + ALIGN_CLASSES)


def _ridge(x: np.ndarray, y: np.ndarray, penalty: float) -> np.ndarray:
    """Class terms, every one pulled towards 0 (a factor of 1)."""
    beta: np.ndarray = np.linalg.solve(x.T @ x + penalty * np.eye(x.shape[1]), x.T @ y)
    return beta


def predicts_held_out(x: np.ndarray, y: np.ndarray, penalty: float, groups: np.ndarray) -> bool:
    """Whether the ridge fit predicts held-out folds of ``groups`` better than no correction (log
    residual 0) does: noise alone does not, so it fits no correction."""
    ids = np.unique(groups)
    k = min(CHECK_FOLDS, ids.size)
    if k < 2:
        return False
    fold_of = {g: i % k for i, g in enumerate(ids)}
    fold = np.array([fold_of[g] for g in groups])
    fitted = none = 0.0
    for f in range(k):
        train, test = fold != f, fold == f
        beta = _ridge(x[train], y[train], penalty)
        fitted += float(((y[test] - x[test] @ beta) ** 2).sum())
        none += float((y[test] ** 2).sum())
    return fitted < none


def fit_correction(
    configs: Sequence[tuple[int, int, int, int]],
    log_residuals: Sequence[float],
    groups: Sequence[str] | None = None,
) -> KnobCorrection:
    """The correction that best explains ``log(measured / predicted)`` of measured configurations
    (block, buffer_num, tile, cores that run), ridge-regularised towards 1 and clipped to
    ``MAX_LOG_FACTOR``. The penalty is ``RIDGE`` times the residuals' robust variance (MAD), so it means
    the same whatever the noise. Every factor is 1 unless the fit predicts held-out folds (of ``groups``,
    the study keys, where there are ``CHECK_FOLDS``; else of rows) better than no correction: noise alone
    fits none. Residuals far out (beyond 5 MADs, e.g. a disturbed measurement) are left out."""
    r = np.asarray(log_residuals, dtype=float)
    if r.size == 0:
        return IDENTITY
    med = float(np.median(r))
    mad = 1.4826 * float(np.median(np.abs(r - med)))
    keep = np.abs(r - med) <= 5 * mad if mad > 0 else np.ones(r.size, dtype=bool)
    x = _design([c for c, k in zip(configs, keep, strict=True) if k])
    y = r[keep]
    g = np.asarray(groups if groups is not None else range(r.size), dtype=object)[keep]
    if np.unique(g).size < CHECK_FOLDS:  # too few keys to hold whole ones out: folds of rows
        g = np.arange(y.size, dtype=object)
    penalty = RIDGE * max(mad * mad, 1e-6)
    if not predicts_held_out(x, y, penalty, g):
        return IDENTITY
    beta = np.clip(_ridge(x, y, penalty), -MAX_LOG_FACTOR, MAX_LOG_FACTOR)
    factors = [math.exp(float(b)) if x[:, i].any() else 1.0 for i, b in enumerate(beta)]
    cut = [*_OFFSETS, x.shape[1]]
    return KnobCorrection(*(tuple(factors[cut[j] : cut[j + 1]]) for j in range(4)))
