"""A device's learned residual over the realised tiling: what its measurements say beyond the hardware fit,
as factors on classes of what the kernel actually does at a size.

The knob correction (``tiling_model.correction``) prices the knobs: a block size, a BUFFER_NUM, a tile
alignment, a core count, whatever the size. A device's effects follow what those knobs make of a size:
the bytes of each copy against the DMA's burst granules, whether the last tile's copy is aligned, whether
the cores' boundaries fall on 512 B, how many tiles a core runs against its buffer count, an odd core
count. Each of those is a class of the realised tiling (``FEATURES``, each a small table of levels); the
residual is one log factor per level, fitted by ridge regression on every measurement of a sweep with
one free level per study key (a key's level is the hardware fit's business: the residual ranks a key's
configurations), its penalty (and the interaction features' multiple of it) chosen by held-out keys, then
the features they say to leave out (a device shows some classes of effect, not all: the others' levels
would fit its noise), and none at all unless it predicts held-out keys better than no residual (noise
alone fits factors of 1).

The features are the engine's (``tiling_model/include/bce_grad_residual.h``, read here through
``_engine.residual_levels``): one source. A device's profile carries its residual (``SocProfile.residual``,
fitted by the sweep's learner, in the knob correction's place where held-out keys say so; the level
across keys set after, ``scaled``); the engine multiplies every prediction of bcetune's kernel by it
(``table``: one factor per level, multiplied in feature order) and its re-fit's floors carry its least
over each range, so the service, the explorer, the torch op and the exported C++ ``TunedTiling`` all
search with it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # the fit needs SciPy (the tune extra); serving reads a fitted residual without it
    from scipy import sparse

from tiling_model import _engine

BUFFERS = 5  # BUFFER_NUM 0 .. 4: every "_x_buffers" feature's level is class * BUFFERS + buffer count
#: (name, levels) of every feature, in the order of ``levels``' columns: the engine's (bce_grad_residual.h),
#: each a table of levels. Interactions with the buffer count are their own features: how deep the
#: pipeline is changes what a copy size or a tile count costs.
FEATURES: tuple[tuple[str, int], ...] = tuple((str(name), int(count)) for name, count in _engine.RESIDUAL_FEATURES)
OFFSETS = tuple(int(x) for x in np.cumsum([0] + [levels for _, levels in FEATURES])[:-1])
COLUMN = {name: j for j, (name, _) in enumerate(FEATURES)}
#: What a search knows of a range of one BUFFER_NUM and core count, and of one tile of it too.
BY_BUFFERS_AND_CORES = ("buffer_num", "cores", "cores_odd_x_buffers")
BY_TILE_TOO = (*BY_BUFFERS_AND_CORES, "tile_align", "tile_align_x_buffers", "tile_in_page_x_buffers", "tile_size",
               "tile_size_x_buffers")  # fmt: skip
WIDTH = sum(levels for _, levels in FEATURES)
#: Penalties tried (times the residuals' robust variance), chosen by held-out keys.
PENALTIES = (3.0, 10.0, 30.0, 100.0, 300.0, 1000.0, 3000.0)
#: The interaction features' penalty (those crossed with the buffer count: ``_x_`` in the name) is the
#: penalty times one of these, chosen by held-out keys with it: a device whose effects are mostly by class
#: (a block size, a buffer count) learns them there rather than spread over their interactions.
INTERACTION_WEIGHTS = (1.0, 3.0)
FOLDS = 5
MAX_LOG_FACTOR = math.log(1.5)
#: A measurement this far (in log) from its key's median and beyond 5 MADs is a disturbed one, left out
#: (the stand-in's outliers are 1.5-3x; an effect of a few per cent over quiet data is not one).
OUTLIER_LOG = math.log(1.2)


def levels(n: int, elem: int, block: np.ndarray, bn: np.ndarray, tile: np.ndarray, cores: np.ndarray) -> np.ndarray:
    """(M, len(FEATURES)) level of each feature for M exact-scheme configurations at ``n`` elements of ``elem``
    bytes (the engine's residual::LevelsOf over its core kinds)."""
    cols = (np.ascontiguousarray(a, dtype=np.int64) for a in (block, bn, tile, cores))
    out: np.ndarray = _engine.residual_levels(n, elem, *cols)
    return out


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
    interaction_weight: float = 1.0  # and the interaction features' multiple of it
    held_out_rms: float = 0.0  # held-out log error with the residual (of the chosen penalty)
    held_out_rms_none: float = 0.0  # and without
    dropped: tuple[str, ...] = ()  # the features held-out keys said to leave out (their factors 1)

    def __post_init__(self) -> None:
        if len(self.beta) != WIDTH or not all(math.isfinite(b) for b in self.beta):
            raise ValueError(f"a residual needs {WIDTH} finite log factors, got {len(self.beta)}")
        unknown = sorted(set(self.dropped) - set(COLUMN))
        if unknown:
            raise ValueError(f"residual dropped names no feature: {unknown} (features: {sorted(COLUMN)})")

    @property
    def identity(self) -> bool:
        return not any(self.beta)

    def scaled(self, log_factor: float) -> Residual:
        """This residual times one factor on every configuration (on each buffer-count level: every
        configuration has one): a level the fit of within-key rankings leaves to the caller."""
        beta = list(self.beta)
        for level in range(BUFFERS):
            beta[OFFSETS[COLUMN["buffer_num"]] + level] += log_factor
        return replace(self, beta=tuple(beta))

    def table(self) -> tuple[float, ...]:
        """The factor of every level (features in order): what the engine and the exported header multiply."""
        return tuple(math.exp(b) for b in self.beta)

    def to_json(self) -> dict[str, Any]:
        """The log factors by feature, and what the fit chose and measured."""
        return {"log_factors": {name: list(self.beta[off : off + count])
                                for (name, count), off in zip(FEATURES, OFFSETS, strict=True)},
                "penalty": self.penalty, "interaction_weight": self.interaction_weight,
                "held_out_rms": self.held_out_rms, "held_out_rms_none": self.held_out_rms_none,
                "dropped": list(self.dropped)}  # fmt: skip

    @classmethod
    def from_json(cls, doc: Any) -> Residual:
        """``to_json``'s document; ValueError naming what does not fit the engine's features."""
        if not isinstance(doc, dict) or not isinstance(doc.get("log_factors"), dict):
            raise ValueError("residual must be an object with log_factors (by feature) and its fit's figures")
        logs = doc["log_factors"]
        if set(logs) != set(COLUMN):
            raise ValueError(f"residual log_factors must name the features {sorted(COLUMN)}, got {sorted(logs)}")
        beta: list[float] = []
        for name, count in FEATURES:
            if not isinstance(logs[name], list) or len(logs[name]) != count:
                raise ValueError(f"residual feature {name!r} needs {count} log factors")
            beta += [float(b) for b in logs[name]]
        dropped = doc.get("dropped", [])  # (absent before the fit chose its features)
        if not isinstance(dropped, list) or not all(isinstance(name, str) for name in dropped):
            raise ValueError("residual dropped must be a list of feature names")
        return cls(tuple(beta), float(doc.get("penalty", 0.0)), float(doc.get("interaction_weight", 1.0)),
                   float(doc.get("held_out_rms", 0.0)), float(doc.get("held_out_rms_none", 0.0)),
                   tuple(dropped))  # fmt: skip

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
        return {"penalty": self.penalty, "interaction_weight": self.interaction_weight,
                "held_out_rms": round(self.held_out_rms, 5),
                "held_out_rms_none": round(self.held_out_rms_none, 5), "factors": learnt,
                "dropped": list(self.dropped)}  # fmt: skip


NONE = Residual()


def summary_line(summary: dict[str, Any]) -> str:
    """One line of what a fit's residual learnt (``Residual.summary``'s document), for the CLIs."""
    factors = summary.get("factors") or {}
    if not factors:
        return "none (held-out keys ranked no better with one)"
    moved = [(abs(f - 1.0), f"{name}[{level}] x{f}") for name, levels in factors.items() for level, f in levels.items()
             if name != "buffer_num"]  # fmt: skip
    top = ", ".join(text for _, text in sorted(moved, reverse=True)[:3])
    level = factors.get("buffer_num")  # they carry the level across keys too
    by_buffers = f"; by BUFFER_NUM (with the level across keys) {level}" if level else ""
    dropped = summary.get("dropped") or []
    left_out = f"; left out by held-out keys: {', '.join(dropped)}" if dropped else ""
    return (f"{len(moved)} levels moved (largest: {top}){by_buffers}{left_out}; held-out within-key log rms "
            f"{summary.get('held_out_rms')} (none: {summary.get('held_out_rms_none')}), penalty "
            f"{summary.get('penalty')} (x{summary.get('interaction_weight', 1.0)} on interactions)")  # fmt: skip


#: The key levels' ridge penalty: barely any (a key's level is the hardware fit's business).
KEY_PENALTY = 1e-6


def _system(x: sparse.csr_matrix, keys: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The normal equations of the feature columns with each key's level solved out, on the columns some case sets
    (a level no case has is all zeros in them, so ridge leaves its weight 0: the system is the rest, a few hundred
    of ~800 columns): (X'X - S'DS, X'y - S'Dt, those columns' indices), S the keys' column sums, t their sums of y,
    D one over their case counts plus KEY_PENALTY: the Schur complement of the keys' block (diagonal: a case has one
    key), so the features' solution is that of the system with a column per key, which grew with the sweep (a fit
    on 924 keys' 20 cases each: 3.6 -> 1.3 s, the factors within 1e-13)."""
    from scipy import sparse

    ids, key_index = np.unique(keys, return_inverse=True)
    kx = sparse.csr_matrix((np.ones(len(y)), (np.arange(len(y)), key_index)), shape=(len(y), ids.size))
    xc = sparse.csc_matrix(x)
    used = np.flatnonzero(np.diff(xc.indptr) > 0)
    part = xc[:, used]
    sums = (kx.T @ part).tocsr()  # S: each key's column sums
    d = sparse.diags(1.0 / (np.asarray(kx.sum(axis=0)).ravel() + KEY_PENALTY))
    gram: np.ndarray = (part.T @ part).toarray() - (sums.T @ d @ sums).toarray()
    rhs: np.ndarray = np.asarray(part.T @ y).ravel() - np.asarray(sums.T @ (d @ (kx.T @ y))).ravel()
    return gram, rhs, used


def _penalties(penalty: float, interaction_weight: float) -> np.ndarray:
    """Each feature column's penalty: ``penalty``, times ``interaction_weight`` on the interaction features."""
    out = np.full(WIDTH, penalty)
    for (name, count), off in zip(FEATURES, OFFSETS, strict=True):
        if "_x_" in name:
            out[off : off + count] *= interaction_weight
    return out


def _solve(
    gram: np.ndarray, rhs: np.ndarray, used: np.ndarray, penalty: np.ndarray, keep: np.ndarray | None = None
) -> np.ndarray:
    """Ridge on the feature columns (``penalty`` per column), each key's level free (``_system``): the features'
    part (0 where no case sets the level, and on the columns ``keep`` leaves out: a feature dropped)."""
    beta = np.zeros(WIDTH)
    mine = np.arange(used.size) if keep is None else np.flatnonzero(keep[used])  # the system's kept rows and columns
    if mine.size:
        beta[used[mine]] = np.linalg.solve(gram[np.ix_(mine, mine)] + np.diag(penalty[used[mine]]), rhs[mine])
    return beta


@dataclass(frozen=True)
class _Fold:
    """One fold of whole keys: the normal equations of the others (``_system``), and its own cases."""

    system: tuple[np.ndarray, np.ndarray, np.ndarray]
    x: sparse.csr_matrix
    y: np.ndarray
    key_index: np.ndarray  # each case's key among the fold's
    key_counts: np.ndarray  # cases per key

    def sse(self, pred: np.ndarray) -> float:
        """Squared log error of its cases, each relative to its key's mean (the ranking within a key is what the
        residual is for): sum r^2 less each key's (sum r)^2 / cases."""
        r = self.y - pred
        sums = np.bincount(self.key_index, weights=r, minlength=self.key_counts.size)
        return float(r @ r - (sums * sums / self.key_counts).sum())


def _folds(x: sparse.csr_matrix, keys: np.ndarray, y: np.ndarray) -> list[_Fold]:
    """The held-out folds of whole keys (each system built once: every penalty and feature set tried solves it)."""
    ids = np.unique(keys)
    fold_of = {g: i % FOLDS for i, g in enumerate(ids)}
    fold = np.array([fold_of[g] for g in keys])
    out = []
    for f in range(min(FOLDS, ids.size)):
        train, test = fold != f, fold == f
        _, index, counts = np.unique(keys[test], return_inverse=True, return_counts=True)
        out.append(_Fold(_system(x[train], keys[train], y[train]), x[test], y[test], index, counts.astype(float)))
    return out


def _fold_sse(folds: list[_Fold], penalties: list[np.ndarray]) -> list[float]:
    """The held-out keys' error (``_Fold.sse``) summed over the folds, for no residual and for each penalty."""
    sse = [0.0] * (len(penalties) + 1)
    for fold in folds:
        sse[0] += fold.sse(np.zeros(fold.y.size))
        for j, p in enumerate(penalties):
            sse[j + 1] += fold.sse(fold.x @ _solve(*fold.system, p))
    return sse


#: Each feature column's feature (FEATURES' index).
FEATURE_OF_COLUMN = np.repeat(np.arange(len(FEATURES)), [count for _, count in FEATURES])


def _kept(dropped: Sequence[int]) -> np.ndarray:
    """The columns of every feature but the ``dropped`` ones (feature indices)."""
    return ~np.isin(FEATURE_OF_COLUMN, list(dropped))


def _drop_each(
    folds: list[_Fold], penalty: np.ndarray, dropped: Sequence[int], candidates: Sequence[int]
) -> list[float]:
    """The held-out keys' error with each candidate feature dropped beside ``dropped``: per fold one inverse M of the
    kept columns' system, each candidate's solution from it (block inverse: beta_K' = beta_K' - M_K'J M_JJ^-1
    beta_J, J its columns) rather than a solve of its own."""
    keep = _kept(dropped)
    sse = [0.0] * len(candidates)
    for fold in folds:
        gram, rhs, used = fold.system
        mine = np.flatnonzero(keep[used])  # the kept columns' rows and columns of the system
        m = np.linalg.inv(gram[np.ix_(mine, mine)] + np.diag(penalty[used[mine]]))
        beta = m @ rhs[mine]
        xk = fold.x[:, used[mine]]
        base = xk @ beta
        owner = FEATURE_OF_COLUMN[used[mine]]
        for i, j in enumerate(candidates):
            cols = np.flatnonzero(owner == j)
            if cols.size == 0:  # no case sets its levels: dropping it changes nothing
                sse[i] += fold.sse(base)
                continue
            delta = -m[:, cols] @ np.linalg.solve(m[np.ix_(cols, cols)], beta[cols])
            delta[cols] = -beta[cols]  # (what the identity gives them, exactly)
            sse[i] += fold.sse(base + xk @ delta)
    return sse


def _select(folds: list[_Fold], penalty: np.ndarray, sse: float) -> tuple[tuple[int, ...], float]:
    """The features to drop, one at a time while the held-out keys' error falls (backward elimination: at each
    step the feature whose removal lowers it most; ``sse``: the error with every feature), and the error without
    them. A device shows only some classes of effect; the levels of the others fit its noise, and an argmin over
    a whole space finds them (docs/benchmarks/untimed-sizes.md). ``buffer_num`` stays: it carries the level
    across keys (``scaled``)."""
    dropped: list[int] = []
    while True:
        candidates = [j for j, (name, _) in enumerate(FEATURES) if j not in dropped and name != "buffer_num"]
        if not candidates:
            return tuple(dropped), sse
        errors = _drop_each(folds, penalty, dropped, candidates)
        best = int(np.argmin(errors))  # (a tie: the earlier feature)
        if errors[best] >= sse:
            return tuple(dropped), sse
        sse = errors[best]
        dropped.append(candidates[best])


def rows_by_key(keys: np.ndarray) -> list[np.ndarray]:
    """Each key's rows (keys in sorted order, rows in theirs): one pass, not a mask over every row per key."""
    _, index = np.unique(keys, return_inverse=True)
    order = np.argsort(index, kind="stable")
    return np.split(order, np.flatnonzero(np.diff(index[order])) + 1) if order.size else []


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
    for rows in rows_by_key(g):
        centred[rows] -= np.median(y[rows])
    mad = 1.4826 * float(np.median(np.abs(centred)))
    keep = np.abs(centred) <= max(5 * mad, OUTLIER_LOG)
    from scipy import sparse

    x, y, g = sparse.csr_matrix(design(lv[keep])), y[keep], g[keep]
    scale = max(mad * mad, 1e-6)
    grid = [(p, w) for w in INTERACTION_WEIGHTS for p in PENALTIES]
    with _one_blas_thread():
        return _fit(x, g, y, scale, grid)


def _one_blas_thread() -> AbstractContextManager[object]:
    """BLAS on one thread for the fit's dense solves (dozens per fit). Measured on a 2-core host when they took
    every column (~800): one thread solved one in ~12 ms, OpenBLAS's two in ~18 ms, and 41-49 ms while another
    process solved too (two sweep workers on one host, pytest's workers): a sweep of 8 keys took 20 s alone and
    135 s beside a second worker. One thread also makes the fit's last bits the same at any core count
    (threaded BLAS sums in another order)."""
    from threadpoolctl import threadpool_limits

    limits: AbstractContextManager[object] = threadpool_limits(limits=1, user_api="blas")
    return limits


def _fit(x: sparse.csr_matrix, g: np.ndarray, y: np.ndarray, scale: float, grid: list[tuple[float, float]]) -> Residual:
    """fit_residual's held-out choice of penalty, then of the features (``_select``), and its fit on every case."""
    folds = _folds(x, g, y)
    none, *sses = _fold_sse(folds, [_penalties(p * scale, w) for p, w in grid])
    tried = dict(zip(grid, sses, strict=True))
    best = min(tried, key=lambda pw: (tried[pw], -pw[0], pw[1]))  # a tie: the stronger penalty, the plainer form
    rms_none = math.sqrt(none / y.size)
    if tried[best] >= none:
        return Residual(penalty=0.0, held_out_rms=rms_none, held_out_rms_none=rms_none)
    penalty, weight = best
    penalties = _penalties(penalty * scale, weight)
    dropped, sse = _select(folds, penalties, tried[best])
    beta = _solve(*_system(x, g, y), penalties, _kept(dropped))
    beta = np.clip(beta, -MAX_LOG_FACTOR, MAX_LOG_FACTOR)
    return Residual(tuple(float(b) for b in beta), penalty, weight, math.sqrt(sse / y.size), rms_none,
                    tuple(FEATURES[j][0] for j in dropped))  # fmt: skip
