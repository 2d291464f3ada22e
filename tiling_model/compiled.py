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
    DEFAULT_L2,
    DUP_CYCLES,
    GM_ALIGN_BYTES,
    PERIOD,
    PRUNE_MARGIN_US,
    PRUNE_RELATIVE,
    REPEAT_BYTES,
    WARMUP,
    _curve,
    l2_hit,
)
from tiling_model.soc import SocProfile  # noqa: E402
from tiling_model.space import TIE_DECIMALS, TILE_STEP_BYTES  # noqa: E402


@dataclass(frozen=True)
class Consts:
    """A kernel on a SoC as the flat numbers the compiled code reads (cold L2 unless ``hit`` says)."""

    # elem, full_inputs, outputs, scalar_inputs, scalar_queue_bytes, row_bytes, streams, workspace_inputs,
    # row_inputs, row_len, row_expand_bytes, hbm_streams
    kernel: np.ndarray
    ops: np.ndarray  # (k, 2): operand bytes, cycles per repeat
    soc: np.ndarray  # launch, core_start, vector_start_cycles, vector_mhz, misaligned, hbm, l2, hbm_peak, l2_peak
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
            kernel.workspace_inputs,
            kernel.row_inputs,
            kernel.row_len,
            kernel.row_expand_bytes,
            kernel.hbm_streams,
        ],
        dtype=np.int64,
    )
    ops = np.array([[op.operand_bytes, op.cycles_per_repeat] for op in kernel.ops], dtype=float).reshape(-1, 2)
    s = np.array(
        [
            soc.launch_us,
            soc.core_start_us,
            soc.vector_start_cycles,
            soc.vector_mhz,
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
def _row_values(elems: float, row_len: float) -> float:
    """``simulate.row_values``: the values of a rows operand one tile reads."""
    if elems <= 0:
        return 0.0
    return min(elems, math.ceil(elems / row_len) + 1.0)


@njit(cache=True, inline="always")
def _vector(elems: float, k: np.ndarray, ops: np.ndarray, start_cycles: float, clock: float) -> float:
    if elems <= 0:
        return 0.0
    cycles = 0.0
    for i in range(ops.shape[0]):
        cycles += start_cycles + math.ceil(elems * ops[i, 0] / REPEAT_BYTES) * ops[i, 1]
    if k[8] > 0:  # one Duplicate per row the tile touches (simulate.vector_us)
        r = float(k[9])
        dup = start_cycles + math.ceil(min(r, elems) * k[10] / REPEAT_BYTES) * DUP_CYCLES
        cycles += k[8] * _row_values(elems, r) * dup
    return cycles / clock


@njit(cache=True, inline="always")
def _stage(elems: float, k: np.ndarray, ops: np.ndarray, s: np.ndarray, mte2: np.ndarray, mte3: np.ndarray,
           tail: np.ndarray, share: float, aligned: bool, vec: float,
           l2_share: float) -> tuple[float, float, float]:  # fmt: skip
    """CopyIn, Compute, CopyOut of one tile of ``elems`` (``vec`` < 0: compute the vector time here)."""
    nbytes = elems * k[0]
    cin = (k[1] - k[8] - k[7]) * _copy(nbytes, mte2, tail[0], tail[1], share, aligned, s[4])
    if k[7] > 0:  # a window of the core's row in L2, at any phase: misaligned
        cin = cin + k[7] * _copy(nbytes, mte2, tail[0], tail[1], l2_share, False, s[4])
    if k[8] > 0:  # the row values start anywhere in GM: misaligned
        values = _row_values(elems, float(k[9])) * k[0]
        cin = cin + k[8] * _copy(values, mte2, tail[0], tail[1], share, False, s[4])
    if k[4] > 0 and elems > 0:
        cin = cin + _copy(float(k[4]), mte2, tail[0], tail[1], share, True, 1.0)
    if vec < 0:
        vec = _vector(elems, k, ops, s[2], s[3])
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
    rows = k[8] * (covered / k[9]) if k[8] > 0 else 0.0
    bytes_moved = (k[11] * covered + rows) * elem + scalar_bytes + block_dim * (k[7] * k[5])
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
    l2_share = s[6] / active
    row_us = k[7] * _copy(float(k[5]), mte2, ct[0], ct[1], share, True, 1.0)
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
                fa0, fb0, fc0 = _stage(float(te), k, ops, s, mte2, mte3, ct, share, aligned[i], full_vec, l2_share)
                full_for = int(aligned[i])
            a, b, c = fa0, fb0, fc0
        else:
            a, b, c = _stage(0.0, k, ops, s, mte2, mte3, ct, share, aligned[i], 0.0, l2_share)
        ta, tb, tc = _stage(float(tail[i]), k, ops, s, mte2, mte3, ct, share, aligned[i], -1.0, l2_share)
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


@njit(cache=True, inline="always")
def _with_tile(elems: tuple, te: int) -> tuple:  # type: ignore[type-arg]
    """The tiles and last-tile elements of each kind for tiles of ``te`` elements (``_kinds``'s)."""
    t0 = -(-elems[0] // te) if elems[0] > 0 else 0
    t1 = -(-elems[1] // te) if elems[1] > 0 else 0
    t2 = -(-elems[2] // te) if elems[2] > 0 else 0
    tail = (
        elems[0] - (t0 - 1) * te if elems[0] > 0 else 0,
        elems[1] - (t1 - 1) * te if elems[1] > 0 else 0,
        elems[2] - (t2 - 1) * te if elems[2] > 0 else 0,
    )
    return (t0, t1, t2), tail


@njit(cache=True, inline="always")
def _core_floor(elems: np.ndarray, te_max: int, bn: int, f: np.ndarray) -> float:
    """A lower bound of the prediction of any tiling of these core kinds (``elems``: the kinds that have
    cores, 0 for none) with tiles of at most ``te_max`` elements: every element copied in, computed and
    copied out at the stages' linear floors ``f`` (fin, pin, fout, pout, vfix, vper, base), along
    ``simulate.bounds_us``'s chains. It rises as ``te_max`` falls (more tiles)."""
    fin, pin, fout, pout, vfix, vper, base = f[0], f[1], f[2], f[3], f[4], f[5], f[6]
    last = fin + vfix + fout  # the last tile's CopyIn, Compute and CopyOut
    core = -np.inf
    for i in range(3):
        if elems[i] <= 0:
            continue
        e = float(elems[i])
        tiles = -(-elems[i] // te_max)
        t = float(tiles)
        hops = float((tiles - 1) // bn)
        spread = max(0.0, e / bn - te_max)
        chain = max(
            max(t * fin + e * pin + vfix + fout, fin + t * vfix + e * vper + fout),
            max(fin + vfix + t * fout + e * pout, hops * (fin + vfix) + spread * (pin + vper) + last),
        )
        core = max(core, chain)
    return base + core


@njit(cache=True, inline="always")
def _config_floor(counts: tuple, tiles: tuple, tail: tuple, te: int, bn: int, f: np.ndarray) -> float:  # type: ignore[type-arg]
    """The chain bound of one tiling with each stage at its linear floor: below ``_evaluate``'s bound."""
    fin, pin, fout, pout, vfix, vper, base = f[0], f[1], f[2], f[3], f[4], f[5], f[6]
    x = float(te)
    fa, fb, fc = fin + x * pin, vfix + x * vper, fout + x * pout
    core = -np.inf
    for i in range(3):
        if counts[i] <= 0 or tiles[i] <= 0:
            continue
        y = float(tail[i])
        ta, tb, tc = fin + y * pin, vfix + y * vper, fout + y * pout
        many = tiles[i] > 1
        nf = float(tiles[i] - 1)
        a, b, c = (fa, fb, fc) if many else (0.0, 0.0, 0.0)
        a1, b1 = (fa, fb) if many else (ta, tb)
        hops = float((tiles[i] - 1) // bn)
        chain = max(
            max(nf * a + ta + tb + tc, a1 + nf * b + tb + tc),
            max(a1 + b1 + nf * c + tc, max(hops * (a + b) + ta + tb + tc, a1 + hops * (b + c) + tb + tc)),
        )
        core = max(core, chain)
    return base + core


@njit(cache=True)
def _refit(n: int, blocks: np.ndarray, bn: int, top_tiles: int, max_cores: int, k: np.ndarray, ops: np.ndarray,
           s: np.ndarray, mte2: np.ndarray, mte3: np.ndarray, ct: np.ndarray, seed_block: int, seed_tile: int,
           seed_cores: int, hit: float) -> tuple[int, int, int, float]:  # fmt: skip
    """The fastest (block, tile, cores) of one buffer count at ``n`` elements (``hit``: the share of the
    traffic that hits L2, a function of n only), ``blocks`` in
    descending order, tiles TILE_STEP_BYTES, 2 * TILE_STEP_BYTES, ... up to ``top_tiles`` of them, with
    ScoredSpace.best_index's tie-break (predictions rounded to 1e-9 us; then the larger tile, more cores,
    the larger block).

    One pass in tie-break order (largest tile, then most cores, then largest block), so a configuration
    wins only by a smaller rounded prediction, i.e. only if it is faster than the fastest seen; each is
    skipped at the first bound that rules that out. Two bounds hold for every smaller tile, so a (block,
    core count) pair they rule out is dropped for good: the traffic's time (it does not depend on the
    tile: tiles are whole 512-B blocks; until a pair's kinds are known, its bytes at the full bandwidth)
    and ``_core_floor``. The rest gets ``_config_floor``, then the chain bound (``simulate.bounds_us``, to
    float rounding: PRUNE_MARGIN_US), and is simulated only if that does not settle it. A pair whose every
    core fits in one tile predicts the same at every tile down to its widest core's (where a smaller tile
    cannot win the tie): it is evaluated once and sleeps until then. A seed configuration (the bucket's
    tuned block, tile and cores; 0: none) is simulated first: nothing slower than it can win, so its
    time prunes from the start. The C++ build's ``bce_grad::cost::Refit`` is this function, line for line.

    The bounds that drop more than the pruned NumPy scoring would (the floors, a dropped pair, the sleep)
    never change the answer: what they drop predicts at or above the fastest seen (it neither wins nor
    lowers that), or more than a tie's width above the seed (which beats it)."""
    elem = k[0]
    nb = blocks.shape[0]
    cores_max = np.empty(nb, dtype=np.int64)
    for bi in range(nb):
        cores_max[bi] = min(max_cores, max(-(-n * elem // blocks[bi]), 1))
    top_cores = cores_max.max()
    agg = 1.0 / ((1.0 - hit) / s[5] + hit / s[6])
    vfix = 0.0
    vper = 0.0
    for i in range(ops.shape[0]):
        vfix += s[2]
        vper += ops[i, 0] / REPEAT_BYTES * ops[i, 1]
    vfix /= s[3]
    vper /= s[3]
    rows = k[8] * (float(n) / k[9]) if k[8] > 0 else 0.0  # a rows operand's n / R values
    fixed_bytes = (k[11] * float(n) + rows) * elem + float(k[3] * elem)
    npairs = (top_cores + 1) * nb
    known = np.zeros(npairs, dtype=np.bool_)
    traffic = np.empty(npairs)
    kinds_elems = np.zeros((npairs, 3), dtype=np.int64)
    kinds_counts = np.zeros((npairs, 3), dtype=np.int64)
    kinds_aligned = np.zeros((npairs, 3), dtype=np.bool_)
    real = np.zeros((npairs, 3), dtype=np.int64)  # elements of the kinds that have cores (0: none)
    widest = np.zeros(npairs, dtype=np.int64)
    floors = np.zeros((npairs, 7))
    alive = np.empty(npairs, dtype=np.int64)  # pair = c * nb + block index, in visiting order
    merged = np.empty(npairs, dtype=np.int64)
    wake = np.full(top_tiles + 1, -1, dtype=np.int64)
    nxt = np.full(npairs, -1, dtype=np.int64)
    n_alive = 0
    for c in range(top_cores, 0, -1):
        floor = s[0] + (fixed_bytes + float(c * (k[7] * k[5]))) / (agg * 1e3)
        for bi in range(nb):
            if c <= cores_max[bi]:
                traffic[c * nb + bi] = floor
                alive[n_alive] = c * nb + bi
                n_alive += 1
    seed_us = np.inf
    for bi in range(nb):
        if (blocks[bi] == seed_block and 1 <= seed_cores <= cores_max[bi] and seed_tile >= TILE_STEP_BYTES
                and seed_tile % TILE_STEP_BYTES == 0 and seed_tile <= top_tiles * TILE_STEP_BYTES):  # fmt: skip
            counts, elems, tiles, tail, aligned, bd = _kinds(n, elem, seed_block, seed_tile, seed_cores)
            seed_us = _evaluate(counts, elems, tiles, tail, aligned, seed_tile // elem, bn, bd, hit, k, ops, s, mte2,
                                mte3, ct, True, -1.0)[0]  # fmt: skip
    seed_tie = seed_us + 1.0 / 10.0**TIE_DECIMALS  # more than a tie's width above the seed: the seed beats it
    best_us = np.inf
    best_key = np.inf
    best_block = -1
    best_tile = -1
    best_cores = -1
    for ti in range(top_tiles, 0, -1):
        if wake[ti] >= 0:  # the pairs that are more than one tile again here join, in visiting order
            m = 0
            a = 0
            p = wake[ti]
            while p >= 0 or a < n_alive:
                if p >= 0 and (a >= n_alive or (top_cores - p // nb, p % nb) < (top_cores - alive[a] // nb,
                                                                                  alive[a] % nb)):  # fmt: skip
                    merged[m] = p
                    p = nxt[p]
                else:
                    merged[m] = alive[a]
                    a += 1
                m += 1
            alive[:m] = merged[:m]
            n_alive = m
        if n_alive == 0:
            continue
        tile = ti * TILE_STEP_BYTES
        te = tile // elem
        full_vec = _vector(float(te), k, ops, s[2], s[3])  # the same full tile on every core count
        kept = 0
        for a in range(n_alive):
            pair = alive[a]
            c = pair // nb
            bi = pair % nb
            if traffic[pair] >= best_us or traffic[pair] > seed_us:
                continue  # and at every smaller tile
            if not known[pair]:
                known[pair] = True
                counts, elems, _, _, aligned, bd = _kinds(n, elem, blocks[bi], TILE_STEP_BYTES, c)
                for i in range(3):
                    kinds_elems[pair, i] = elems[i]
                    kinds_counts[pair, i] = counts[i]
                    kinds_aligned[pair, i] = aligned[i]
                    if counts[i] > 0:
                        real[pair, i] = elems[i]
                        widest[pair] = max(widest[pair], elems[i])
                t0 = (1, 1, 1)
                traffic[pair] = s[0] + _traffic(counts, elems, t0, aligned, bd, k, s, agg)[0]
                share = agg / bd
                per_byte = 1.0 / (share * 1e3)
                floors[pair, 0] = k[1] * ct[1]
                # the rows' few values: not bounded; the workspace windows at the L2 share
                floors[pair, 1] = (k[1] - k[8] - k[7]) * float(elem) * per_byte + k[7] * float(elem) / (s[6] / bd * 1e3)
                floors[pair, 2] = k[2] * ct[3]
                floors[pair, 3] = k[2] * float(elem) * per_byte
                floors[pair, 4] = vfix
                floors[pair, 5] = vper
                floors[pair, 6] = s[0] + s[1] + k[7] * _copy(float(k[5]), mte2, ct[0], ct[1], share, True, 1.0)
                if traffic[pair] >= best_us or traffic[pair] > seed_us:
                    continue
            floor = _core_floor(real[pair], te, bn, floors[pair]) if s[4] <= 1.0 else -np.inf
            margin = PRUNE_MARGIN_US + 1e-9 * abs(floor)  # float rounding, generously
            if floor - margin >= best_us or floor - margin > seed_tie:
                continue  # and at every smaller tile
            if te >= widest[pair]:  # every core one tile: the same prediction down to the widest core's tile
                again = -(-widest[pair] * elem // TILE_STEP_BYTES) - 1
                if again >= 1:
                    prev = -1
                    q = wake[again]
                    while q >= 0 and (top_cores - q // nb, q % nb) < (top_cores - c, bi):
                        prev = q
                        q = nxt[q]
                    nxt[pair] = q
                    if prev < 0:
                        wake[again] = pair
                    else:
                        nxt[prev] = pair
            else:
                alive[kept] = pair
                kept += 1
            counts = (kinds_counts[pair, 0], kinds_counts[pair, 1], kinds_counts[pair, 2])
            elems = (kinds_elems[pair, 0], kinds_elems[pair, 1], kinds_elems[pair, 2])
            aligned = (kinds_aligned[pair, 0], kinds_aligned[pair, 1], kinds_aligned[pair, 2])
            tiles, tail = _with_tile(elems, te)
            linear = _config_floor(counts, tiles, tail, te, bn, floors[pair]) if s[4] <= 1.0 else -np.inf
            gap = PRUNE_MARGIN_US + 1e-9 * abs(linear)
            if linear - gap >= best_us or linear - gap > seed_tie:
                continue
            r = _evaluate(counts, elems, tiles, tail, aligned, te, bn, c, hit, k, ops, s, mte2, mte3, ct, False,
                          full_vec)  # fmt: skip
            slack = PRUNE_MARGIN_US + PRUNE_RELATIVE * r[8]  # the bound is the chain's to float rounding
            if r[8] - slack >= best_us or r[8] - slack > seed_us:
                continue
            if r[9]:
                us = r[8]
            else:
                us = _evaluate(counts, elems, tiles, tail, aligned, te, bn, c, hit, k, ops, s, mte2, mte3, ct, True,
                               full_vec)[0]  # fmt: skip
            key = np.round(us, TIE_DECIMALS)
            if key < best_key:
                best_key, best_block, best_tile, best_cores = key, blocks[bi], tile, c
            best_us = min(best_us, us)
        n_alive = kept
    return best_block, best_tile, best_cores, best_us


def refit_choice(
    kernel: ElementwiseKernel,
    soc: SocProfile,
    n: int,
    blocks: tuple[int, ...],
    bn: int,
    tile_choices: np.ndarray,
    seed: tuple[int, int, int] | None = None,
) -> tuple[int, int, int, float]:
    """(block_bytes, tile_bytes, core_num, predicted us) of the model's best configuration with one of
    these block sizes and this buffer count at ``n`` elements, in the default L2 state: what ``space.score_space(...,
    blocks_only=blocks, buffers_only=(bn,)).best_index()`` picks; ``seed`` (block, tile, cores) only
    speeds the search up. ``tile_choices`` must be ``space.tile_choices``'s (TILE_STEP_BYTES multiples
    from one step up); (-1, -1, -1, inf) if it is empty."""
    top = tile_choices.shape[0]
    if not np.array_equal(tile_choices, np.arange(1, top + 1) * TILE_STEP_BYTES):
        raise ValueError("tile_choices must be TILE_STEP_BYTES, 2 * TILE_STEP_BYTES, ... (space.tile_choices)")
    if kernel.scalar_queue_bytes:
        raise ValueError("the re-fit is for exact-scheme kernels (with a scalar queue the traffic depends on the tile)")
    if top == 0 or n < 1:
        return -1, -1, -1, float("inf")
    c = consts(kernel, soc)
    order = np.array(sorted(set(blocks), reverse=True), dtype=np.int64)
    seed_block, seed_tile, seed_cores = seed if seed is not None else (0, 0, 0)
    hit = float(l2_hit(kernel, soc, np.array([n]), DEFAULT_L2)[0])
    block, tile, cores, us = _refit(n, order, bn, top, soc.aiv_cores, c.kernel, c.ops, c.soc, c.mte2, c.mte3,
                                    c.curve_tail, seed_block, seed_tile, seed_cores, hit)  # fmt: skip
    return int(block), int(tile), int(cores), float(us)


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
    refit_choice(kernel, soc, 100_003, (512, 1024), 2, np.arange(512, 8193, 512), (512, 4096, 48))
    one = np.array([1, 1, 1])
    evaluate(kernel, soc, one, one * 64, one, one * 64, np.array([True, True, True]), 64, 2, 3, 0.0)
    _READY.set()
    return time.perf_counter() - start
