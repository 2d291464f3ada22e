# mypy: disable-error-code="no-any-return"
"""The cost model's hot paths compiled with numba: one tiling's prediction, and the re-fit of a
bucket's core count and tile at an exact size.

Same model, same arithmetic in the same order as ``simulate.py`` (NumPy, vectorised over many
tilings), one tiling at a time in compiled loops: a prediction in microseconds instead of the half
millisecond NumPy spends on one row, and a re-fit that bounds every configuration and simulates only
those that can win (``simulate.bounds_us``'s argument) without building arrays. tests/test_compiled.py
checks both against the NumPy model on random cases.
"""

from __future__ import annotations

import functools
import math
import os
import threading
import time
from dataclasses import dataclass

import numpy as np

# numba's on-disk cache of compiled code (set before numba reads it): a read-only install caches in /tmp
os.environ.setdefault("NUMBA_CACHE_DIR", os.path.join(os.environ.get("TMPDIR", "/tmp"), "bcetune-numba"))

from numba import njit  # noqa: E402

from tiling_model.kernels import ElementwiseKernel  # noqa: E402
from tiling_model.simulate import (  # noqa: E402
    BOUND_SLACK,
    GM_ALIGN_BYTES,
    PERIOD,
    PRUNE_MARGIN_US,
    PRUNE_RELATIVE,
    REPEAT_BYTES,
    WARMUP,
    _curve,
)
from tiling_model.soc import SocProfile  # noqa: E402
from tiling_model.space import TIE_DECIMALS  # noqa: E402


@dataclass(frozen=True)
class Consts:
    """A kernel on a SoC as the flat numbers the compiled code reads (cold L2 unless ``hit`` says)."""

    kernel: np.ndarray  # elem, full_inputs, outputs, scalar_inputs, scalar_queue_bytes, row_bytes, streams
    ops: np.ndarray  # (k, 2): operand bytes, cycles per repeat
    soc: np.ndarray  # launch, core_start, vector_start_cycles, clock, misaligned, hbm, l2, hbm_peak, l2_peak
    mte2: np.ndarray  # (p, 2) curve points in bytes, us
    mte3: np.ndarray
    curve_tail: np.ndarray  # mte2 slope, mte2 fixed, mte3 slope, mte3 fixed


@functools.lru_cache(maxsize=512)
def consts(kernel: ElementwiseKernel, soc: SocProfile) -> Consts:
    """What the compiled code needs of ``kernel`` on ``soc`` (cached: a pure function of both)."""
    k = np.array(
        [
            kernel.elem_bytes,
            len(kernel.full_inputs),
            len(kernel.outputs),
            len(kernel.scalar_inputs),
            kernel.scalar_queue_bytes,
            kernel.row_bytes,
            kernel.streams,
        ],
        dtype=np.int64,
    )
    ops = np.array([[op.operand_bytes, op.cycles_per_repeat] for op in kernel.ops], dtype=float).reshape(-1, 2)
    s = np.array(
        [
            soc.launch_us,
            soc.core_start_us,
            soc.vector_start_cycles,
            soc.clock_mhz,
            soc.misaligned_bw_factor,
            soc.hbm_gbps,
            soc.l2_gbps,
            soc.hbm_peak_gbps,
            soc.l2_peak_gbps,
        ]
    )
    kib2, us2, slope2, fixed2 = _curve(soc.mte2_curve_kib_us)
    kib3, us3, slope3, fixed3 = _curve(soc.mte3_curve_kib_us)
    return Consts(
        k,
        ops,
        s,
        np.stack([kib2, us2], axis=1),
        np.stack([kib3, us3], axis=1),
        np.array([slope2, fixed2, slope3, fixed3]),
    )


@njit(cache=True, inline="always")
def _interp(x: float, curve: np.ndarray) -> float:
    """``np.interp(x, curve[:, 0], curve[:, 1])`` with NumPy's arithmetic (numpy/core/src/multiarray/
    compiled_base.c, arr_interp): exact at a point, else slope * (x - x_j) + y_j."""
    last = curve.shape[0] - 1
    if x >= curve[last, 0]:
        return curve[last, 1]
    if x < curve[0, 0]:
        return curve[0, 1]
    j = 0
    while j + 1 <= last and curve[j + 1, 0] <= x:
        j += 1
    if curve[j, 0] == x:
        return curve[j, 1]
    slope = (curve[j + 1, 1] - curve[j, 1]) / (curve[j + 1, 0] - curve[j, 0])
    return slope * (x - curve[j, 0]) + curve[j, 1]


@njit(cache=True, inline="always")
def _copy(
    nbytes: float, curve: np.ndarray, slope: float, fixed: float, share: float, aligned: bool, mis: float
) -> float:
    if nbytes <= 0:
        return 0.0
    last = curve.shape[0] - 1
    if nbytes <= curve[last, 0]:
        t = _interp(nbytes, curve)
    else:
        t = curve[last, 1] + (nbytes - curve[last, 0]) * slope
    t = max(t, fixed + nbytes / (share * 1e3))
    if not aligned:
        t = fixed + (t - fixed) / mis
    return t


@njit(cache=True, inline="always")
def _vector(elems: float, ops: np.ndarray, start_cycles: float, clock: float) -> float:
    if elems <= 0:
        return 0.0
    cycles = 0.0
    for i in range(ops.shape[0]):
        cycles += start_cycles + math.ceil(elems * ops[i, 0] / REPEAT_BYTES) * ops[i, 1]
    return cycles / clock


@njit(cache=True, inline="always")
def _stage(elems: float, k: np.ndarray, ops: np.ndarray, s: np.ndarray, mte2: np.ndarray, mte3: np.ndarray,
           tail: np.ndarray, share: float, aligned: bool, vec: float) -> tuple[float, float, float]:  # fmt: skip
    """CopyIn, Compute, CopyOut of one tile of ``elems`` (``vec`` < 0: compute the vector time here)."""
    nbytes = elems * k[0]
    cin = k[1] * _copy(nbytes, mte2, tail[0], tail[1], share, aligned, s[4])
    if k[4] > 0 and elems > 0:
        cin = cin + _copy(float(k[4]), mte2, tail[0], tail[1], share, True, 1.0)
    if vec < 0:
        vec = _vector(elems, ops, s[2], s[3])
    cout = k[2] * _copy(nbytes, mte3, tail[2], tail[3], share, aligned, s[4])
    return cin, vec, cout


@njit(cache=True, inline="always")
def _step(col: int, bn: int, x: float, y: float, z: float, in_end: float, comp_end: float, out_end: float,
          comp_hist: np.ndarray, out_hist: np.ndarray) -> tuple[float, float, float]:  # fmt: skip
    """Tile ``col``'s CopyIn, Compute and CopyOut ends (``simulate._pipeline_row``'s step)."""
    back = max(col - bn, -1) + 1
    ie = max(in_end, comp_hist[back]) + x
    ce = max(max(ie, comp_end), out_hist[back]) + y
    return ie, ce, max(ce, out_end) + z


@njit(cache=True)
def _pipeline(ntiles: int, a: float, b: float, c: float, ta: float, tb: float, tc: float, bn: int) -> float:
    """``simulate._pipeline_row``, compiled: the same steps on the same doubles."""
    comp_hist = np.zeros(WARMUP + PERIOD + 1)
    out_hist = np.zeros(WARMUP + PERIOD + 1)
    in_end = comp_end = out_end = 0.0
    h = 1  # next history slot
    for col in range(min(WARMUP, ntiles)):
        last = ntiles - 1 == col
        in_end, comp_end, out_end = _step(col, bn, ta if last else a, tb if last else b, tc if last else c,
                                          in_end, comp_end, out_end, comp_hist, out_hist)  # fmt: skip
        comp_hist[h], out_hist[h] = comp_end, out_end
        h += 1
    if ntiles > WARMUP:
        period = (out_hist[WARMUP] - out_hist[WARMUP - PERIOD]) / PERIOD
        skip = (ntiles - WARMUP - 1) // PERIOD * PERIOD
        shift = skip * period
        in_end, comp_end, out_end = in_end + shift, comp_end + shift, out_end + shift
        for i in range(1, h):
            comp_hist[i] = comp_hist[i] + shift
            out_hist[i] = out_hist[i] + shift
        remaining = ntiles - WARMUP - skip
        for j in range(PERIOD):
            last = remaining - 1 == j
            ie, ce, oe = _step(WARMUP + j, bn, ta if last else a, tb if last else b, tc if last else c,
                               in_end, comp_end, out_end, comp_hist, out_hist)  # fmt: skip
            if j < remaining:
                in_end, comp_end, out_end = ie, ce, oe
            comp_hist[h], out_hist[h] = comp_end, out_end
            h += 1
    return out_end


@njit(cache=True)
def _kinds(n: int, elem: int, block: int, tile: int, core_num: int) -> tuple:  # type: ignore[type-arg]
    """``simulate.kinds_exact`` for one configuration, as tuples (no allocation in the hot loop): per
    kind (big, small, last) the cores, elements, tiles, last-tile elements and alignment; the block dim."""
    block_elems = block // elem
    te = tile // elem
    blocks = -(-n // block_elems)
    cores = max(min(core_num, blocks), 1)
    every = blocks // cores
    tail_blocks = blocks - every * cores
    small = every * block_elems
    big = small + block_elems
    last = n - (big * tail_blocks + small * (cores - 1 - tail_blocks))
    counts = (tail_blocks, cores - 1 - tail_blocks, 1)
    elems = (big, small, last)
    if n == 0:
        counts = (0, 0, 0)
        elems = (0, 0, 0)
        cores = 0
    t0 = -(-elems[0] // te) if elems[0] > 0 else 0
    t1 = -(-elems[1] // te) if elems[1] > 0 else 0
    t2 = -(-elems[2] // te) if elems[2] > 0 else 0
    tiles = (t0, t1, t2)
    tail = (
        elems[0] - (t0 - 1) * te if elems[0] > 0 else 0,
        elems[1] - (t1 - 1) * te if elems[1] > 0 else 0,
        elems[2] - (t2 - 1) * te if elems[2] > 0 else 0,
    )
    stride_ok = tile % GM_ALIGN_BYTES == 0
    aligned = (
        stride_ok and ((big * elem) % GM_ALIGN_BYTES == 0 or tail_blocks <= 1),
        stride_ok and (big * tail_blocks * elem) % GM_ALIGN_BYTES == 0 and (small * elem) % GM_ALIGN_BYTES == 0,
        stride_ok and ((n - last) * elem) % GM_ALIGN_BYTES == 0,
    )
    return counts, elems, tiles, tail, aligned, cores


@njit(cache=True, inline="always")
def _traffic(counts: tuple, elems: tuple, tiles: tuple, aligned: tuple, block_dim: int,  # type: ignore[type-arg]
             k: np.ndarray, s: np.ndarray, agg: float) -> tuple[float, float]:  # fmt: skip
    """(bytes over the aggregate bandwidth, bytes moved): what the launch can never beat."""
    elem = k[0]
    covered = 0.0
    queued = 0.0
    csum = 0.0
    mis_cores = 0.0
    for i in range(3):
        covered += float(counts[i] * elems[i])
        queued += float(counts[i] * tiles[i])
        csum += counts[i]
        if not aligned[i]:
            mis_cores += counts[i]
    scalar_bytes = float(k[3] * elem)
    if k[4] > 0:
        scalar_bytes = queued * k[4]
    bytes_moved = k[6] * covered * elem + scalar_bytes + block_dim * k[5]
    misaligned = 1.0 - mis_cores / max(csum, 1.0) * (1.0 - s[4])
    return bytes_moved / (agg * 1e3 * misaligned), bytes_moved


@njit(cache=True)
def _evaluate(counts: tuple, elems: tuple, tiles: tuple, tail: tuple, aligned: tuple,  # type: ignore[type-arg]
              te: int, bn: int, block_dim: int, hit: float, k: np.ndarray, ops: np.ndarray, s: np.ndarray,
              mte2: np.ndarray, mte3: np.ndarray, ct: np.ndarray, exact: bool, full_vec: float) -> tuple:  # type: ignore[type-arg]  # fmt: skip
    """One tiling: (predicted, core_us, bandwidth_us, busy MTE2, busy V, busy MTE3, bytes moved, roofline,
    lower bound, bound is the prediction). With ``exact`` False the pipeline is only bounded."""
    active = float(max(block_dim, 1))
    agg = 1.0 / ((1.0 - hit) / s[5] + hit / s[6])
    agg_peak = 1.0 / ((1.0 - hit) / s[7] + hit / s[8])
    share = agg / active
    row_us = _copy(float(k[5]), mte2, ct[0], ct[1], share, True, 1.0)
    core_us = 0.0
    slowest = -1
    busy0 = busy1 = busy2 = 0.0
    lower_core = 0.0
    upper_core = 0.0
    single = True
    full_for = -1  # the alignment the cached full-tile stage was computed for (-1: none yet)
    fa0 = fb0 = fc0 = 0.0
    for i in range(3):
        nt = tiles[i]
        if counts[i] <= 0 or nt <= 0:
            continue
        single = single and nt <= 1
        if nt > 1:  # the full tile's stage depends on the alignment only: kinds share it
            if full_for != int(aligned[i]):
                fa0, fb0, fc0 = _stage(float(te), k, ops, s, mte2, mte3, ct, share, aligned[i], full_vec)
                full_for = int(aligned[i])
            a, b, c = fa0, fb0, fc0
        else:
            a, b, c = _stage(0.0, k, ops, s, mte2, mte3, ct, share, aligned[i], 0.0)
        ta, tb, tc = _stage(float(tail[i]), k, ops, s, mte2, mte3, ct, share, aligned[i], -1.0)
        nfull = nt - 1
        a1 = ta if nt <= 1 else a
        b1 = tb if nt <= 1 else b
        hops = nfull // bn
        chain = max(
            max(nfull * a + ta + tb + tc, a1 + nfull * b + tb + tc),
            max(a1 + b1 + nfull * c + tc, max(hops * (a + b) + ta + tb + tc, a1 + hops * (b + c) + tb + tc)),
        )
        lower_core = max(lower_core, chain + s[1] + row_us)
        fa, fb, fc = max(a, ta), max(b, tb), max(c, tc)
        period = max(max(max(fa, fb), max(fc, (fa + fb) / bn)), (fb + fc) / bn)
        upper_core = max(upper_core, nfull * period + fa + fb + fc + s[1] + row_us)
        if exact:
            end = _pipeline(nt, a, b, c, ta, tb, tc, bn) + s[1] + row_us
            if slowest < 0 or end > core_us:  # argmax: the first kind of the largest time
                slowest, core_us = i, end
                busy0, busy1, busy2 = nfull * a + ta, nfull * b + tb, nfull * c + tc
    bandwidth_us, bytes_moved = _traffic(counts, elems, tiles, aligned, block_dim, k, s, agg)
    launched = block_dim > 0
    predicted = s[0] + max(core_us, bandwidth_us) if launched and exact else 0.0
    roofline = s[0] + bytes_moved / (agg_peak * 1e3) if launched else 0.0
    lower = s[0] + max(lower_core, bandwidth_us) if launched else 0.0
    certain = (not launched) or single or upper_core * (1 + BOUND_SLACK) + BOUND_SLACK < bandwidth_us
    return (predicted, core_us, bandwidth_us, busy0, busy1, busy2, bytes_moved, roofline, lower, certain)


@njit(cache=True)
def _refit(n: int, block: int, bn: int, tile_choices: np.ndarray, max_cores: int, k: np.ndarray, ops: np.ndarray,
           s: np.ndarray, mte2: np.ndarray, mte3: np.ndarray, ct: np.ndarray, seed_tile: int,
           seed_cores: int) -> tuple[int, int, float]:  # fmt: skip
    """The fastest (tile, cores) of one block size and buffer count at ``n`` elements (cold L2), with
    ScoredSpace.best_index's tie-break (predictions rounded to 1e-9 us; then larger tile, more cores).

    One pass in tie-break order (largest tile, most cores first), so a configuration can win only by a
    smaller rounded prediction, i.e. only if it is faster than the fastest seen. Each is skipped at the
    first bound that rules that out: the traffic's time (an exact lower bound, cheap), then the chain
    bound (``simulate.bounds_us``, to float rounding: PRUNE_MARGIN_US); only the rest is simulated. A
    seed configuration (the bucket's tuned tile and cores; 0: none) is simulated first: nothing slower
    than it can win, ties with it included, so its time prunes from the start."""
    elem = k[0]
    blocks = max(-(-n * elem // block), 1)
    cores_max = min(max_cores, blocks)
    agg = 1.0 / ((1.0 - 0.0) / s[5] + 0.0 / s[6])
    best_us = np.inf
    best_key = np.inf
    best_tile = -1
    best_cores = -1
    one_tile = np.zeros(cores_max + 1, dtype=np.bool_)  # a larger tile already gave every core one tile
    seed_us = np.inf
    if seed_tile > 0 and 1 <= seed_cores <= cores_max:
        counts, elems, tiles, tail, aligned, bd = _kinds(n, elem, block, seed_tile, seed_cores)
        seed_us = _evaluate(counts, elems, tiles, tail, aligned, seed_tile // elem, bn, bd, 0.0, k, ops, s, mte2,
                            mte3, ct, True, -1.0)[0]  # fmt: skip
    for ti in range(tile_choices.shape[0] - 1, -1, -1):
        tile = tile_choices[ti]
        full_vec = _vector(float(tile // elem), ops, s[2], s[3])  # the same full tile on every core count
        for c in range(cores_max, 0, -1):
            counts, elems, tiles, tail, aligned, bd = _kinds(n, elem, block, tile, c)
            single = tiles[0] <= 1 and tiles[1] <= 1 and tiles[2] <= 1
            if single and one_tile[c]:
                continue  # the same tiling as with the larger tile (one tile per core): it cannot win the tie
            one_tile[c] = single
            bandwidth_us, _ = _traffic(counts, elems, tiles, aligned, bd, k, s, agg)
            if s[0] + bandwidth_us >= best_us or s[0] + bandwidth_us > seed_us:
                continue
            r = _evaluate(counts, elems, tiles, tail, aligned, tile // elem, bn, bd, 0.0, k, ops, s, mte2, mte3, ct,
                          False, full_vec)  # fmt: skip
            slack = PRUNE_MARGIN_US + PRUNE_RELATIVE * r[8]  # the bound is the chain's to float rounding
            if r[8] - slack >= best_us or r[8] - slack > seed_us:
                continue
            if r[9]:
                us = r[8]
            else:
                us = _evaluate(counts, elems, tiles, tail, aligned, tile // elem, bn, bd, 0.0, k, ops, s, mte2,
                               mte3, ct, True, full_vec)[0]  # fmt: skip
            key = np.round(us, TIE_DECIMALS)
            if key < best_key:
                best_key, best_tile, best_cores = key, tile, c
            best_us = min(best_us, us)
    return best_tile, best_cores, best_us


def refit_choice(
    kernel: ElementwiseKernel,
    soc: SocProfile,
    n: int,
    block: int,
    bn: int,
    tile_choices: np.ndarray,
    seed: tuple[int, int] | None = None,
) -> tuple[int, int, float]:
    """(tile_bytes, core_num, predicted us) of the model's best configuration with this block and
    buffer count at ``n`` elements, L2 cold: what ``space.score_space(..., blocks_only=(block,),
    buffers_only=(bn,)).best_index()`` picks; ``seed`` (tile, cores) only speeds the search up."""
    c = consts(kernel, soc)
    seed_tile, seed_cores = seed if seed is not None and seed[0] in tile_choices else (0, 0)
    tile, cores, us = _refit(n, block, bn, tile_choices.astype(np.int64), soc.aiv_cores, c.kernel, c.ops, c.soc,
                             c.mte2, c.mte3, c.curve_tail, seed_tile, seed_cores)  # fmt: skip
    return int(tile), int(cores), float(us)


def evaluate(
    kernel: ElementwiseKernel, soc: SocProfile, counts: np.ndarray, elems: np.ndarray, tiles: np.ndarray,
    tail: np.ndarray, aligned: np.ndarray, tile_elems: int, bn: int, block_dim: int, hit: float,
) -> tuple[float, ...]:  # fmt: skip
    """One tiling's prediction from its core kinds: (predicted, core_us, bandwidth_us, busy MTE2, busy V,
    busy MTE3, bytes moved, roofline, ...)."""
    c = consts(kernel, soc)

    def three(x: np.ndarray, kind: type) -> tuple:  # type: ignore[type-arg]
        return (kind(x[0]), kind(x[1]), kind(x[2]))

    kinds = (three(counts, int), three(elems, int), three(tiles, int), three(tail, int), three(aligned, bool))
    r = _evaluate(
        *kinds, tile_elems, bn, block_dim, hit, c.kernel, c.ops, c.soc, c.mte2, c.mte3, c.curve_tail, True, -1.0
    )
    return tuple(float(x) for x in r)


_READY = threading.Event()


def ready() -> bool:
    """Whether this process has the compiled code (``warm_up`` ran): until then callers use the NumPy
    model, which gives the same answers, slower (a first compile takes ~20 s; numba's cache ~0.5 s)."""
    return _READY.is_set()


def warm_up() -> float:
    """Compile (or load from numba's on-disk cache) every entry point; returns the seconds it took."""
    from tiling_model.kernels import bce_grad_kernel
    from tiling_model.soc import load_soc
    from tiling_model.variant import Variant

    start = time.perf_counter()
    soc = load_soc("Ascend910B2")
    kernel = bce_grad_kernel(Variant("float16", "mean"), "exact", 1)
    refit_choice(kernel, soc, 100_003, 512, 2, np.arange(512, 8193, 512), (4096, 48))
    one = np.array([1, 1, 1])
    evaluate(kernel, soc, one, one * 64, one, one * 64, np.array([True, True, True]), 64, 2, 3, 0.0)
    _READY.set()
    return time.perf_counter() - start
