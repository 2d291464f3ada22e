"""Pipeline simulator of one kernel launch, vectorised over many tilings at once: the cost model's
readable specification. The engine that answers (``tiling_model.engine``, the C++ model the build
compiles) computes the same operations on the same doubles in the same order, one tiling at a time;
tests/tiling_model/test_engine.py holds the two equal to the bit.

Each core runs its tiles through three pipes in order: CopyIn on MTE2 (one DMA per input
stream read), Compute on V (the kernel's vector instructions) and CopyOut on MTE3, with
``buffer_num`` buffers per queue. With queue-based synchronisation the scalar unit runs
ahead, so tile i's events obey:

    in_start[i]   = max(in_end[i-1], comp_end[i-bn])            (MTE2 in order; input buffer free)
    comp_start[i] = max(in_end[i], comp_end[i-1], out_end[i-bn])   (V in order; output buffer free)
    out_start[i]  = max(comp_end[i], out_end[i-1])              (MTE3 in order)

A core's time is its last CopyOut's end plus a fixed start-up. Cores of one kind (big,
small, last) do identical work, so each kind is simulated once. Long tile sequences are
simulated for their first ``WARMUP`` tiles, then advanced by whole periods of the steady
state (the recurrence is max-plus linear, so the periodic regime repeats exactly), then the
final tiles are simulated again: cost is O(WARMUP) per core kind, whatever the tile count.

Copy costs: the measured per-DMA curve of one core, but never faster than the core's share
of the aggregate HBM bandwidth; copies whose GM start is not 512-B aligned get the SoC's
misalignment factor on their bandwidth part. The launch can never beat bytes moved over the
aggregate bandwidth, HBM and L2 mixed by the share of the traffic that hits L2, as the launch's
``L2State`` says (its parameter ``l2``): cold by default (``DEFAULT_L2``: first touch, all HBM,
what bcetune tunes for), warm, the SoC profile's fitted steady state of repeated launches, or an
explicit curve.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from tiling_model.kernels import ElementwiseKernel
from tiling_model.model_types import (
    BOUND_SLACK,
    DEFAULT_L2,
    DUP_CYCLES,
    PERIOD,
    REPEAT_BYTES,
    WARMUP,
    BatchResult,
    CoreKinds,
    L2State,
    SteadyL2,
    resident_share,
)
from tiling_model.residual import OFFSETS, levels
from tiling_model.soc import SocProfile


@functools.lru_cache(maxsize=64)
def curve(points: tuple[tuple[float, float], ...]) -> tuple[np.ndarray, np.ndarray, float, float]:
    """A DMA curve's points in bytes and us, its slope past the last point (us per byte) and the fixed cost
    it extrapolates to at 0 bytes."""
    kib = np.array([p[0] for p in points]) * 1024.0
    us = np.array([p[1] for p in points])
    slope = (us[-1] - us[-2]) / (kib[-1] - kib[-2])
    fixed = max(us[0] - kib[0] * (us[1] - us[0]) / (kib[1] - kib[0]), 0.0)
    return kib, us, slope, fixed


def copy_us(
    nbytes: np.ndarray,
    points: tuple[tuple[float, float], ...],
    share_gbps: np.ndarray,
    aligned: np.ndarray | bool,
    misaligned_factor: float,
) -> np.ndarray:
    """Time of one DMA of ``nbytes`` on one core (0 for 0 bytes)."""
    kib, us, slope, fixed = curve(points)
    b = np.asarray(nbytes, dtype=float)
    t = np.where(b <= kib[-1], np.interp(b, kib, us), us[-1] + (b - kib[-1]) * slope)
    t = np.maximum(t, fixed + b / (share_gbps * 1e3))
    t = np.where(aligned, t, fixed + (t - fixed) / misaligned_factor)
    return np.where(b > 0, t, 0.0)


def vector_us(kernel: ElementwiseKernel, elems: np.ndarray, soc: SocProfile) -> np.ndarray:
    """Time of one tile's vector instructions (0 for an empty tile)."""
    e = np.asarray(elems, dtype=float)
    cycles = np.zeros_like(e)
    for op in kernel.ops:
        cycles += soc.vector_start_cycles + np.ceil(e * op.operand_bytes / REPEAT_BYTES) * op.cycles_per_repeat
    if kernel.row_inputs:  # one Duplicate per row the tile touches, each over at most R elements
        r = float(kernel.row_len)
        dup = soc.vector_start_cycles + np.ceil(np.minimum(r, e) * kernel.row_expand_bytes / REPEAT_BYTES) * DUP_CYCLES
        cycles += kernel.row_inputs * row_values(e, r) * dup
    return np.where(e > 0, cycles / soc.vector_mhz, 0.0)


def row_values(elems: np.ndarray, row_len: float) -> np.ndarray:
    """Values a tile of ``elems`` elements reads of a rows operand: the rows it touches, at most
    ceil(elems / R) + 1 (its first row may start before it), never more than its elements."""
    e = np.asarray(elems, dtype=float)
    return np.where(e > 0, np.minimum(e, np.ceil(e / row_len) + 1.0), 0.0)


def pipeline(
    ntiles: np.ndarray, full: tuple[np.ndarray, ...], tail: tuple[np.ndarray, ...], bn: np.ndarray
) -> np.ndarray:
    """End time of the last CopyOut for each row (arrays of shape (R,)): the recurrence above, rows of one
    buffer count at a time."""
    out = np.zeros(ntiles.shape[0])
    for b in np.unique(bn):
        rows = bn == b
        out[rows] = _pipeline_fixed_bn(ntiles[rows], tuple(x[rows] for x in full), tuple(x[rows] for x in tail), int(b))
    return out


def _pipeline_fixed_bn(
    ntiles: np.ndarray, full: tuple[np.ndarray, ...], tail: tuple[np.ndarray, ...], bn: int
) -> np.ndarray:
    rows = ntiles.shape[0]
    zero = np.zeros(rows)
    comp_hist = [zero]  # comp_hist[i + 1]: comp_end after step i; [0]: time 0
    out_hist = [zero]
    in_end, comp_end, out_end = zero, zero, zero

    def step(col: int, active: np.ndarray, is_tail: np.ndarray) -> None:
        nonlocal in_end, comp_end, out_end
        a, b, c = (np.where(is_tail, t, f) for f, t in zip(full, tail, strict=True))
        back = max(col - bn, -1) + 1  # history slot of tile i - bn (0: before the first tile)
        ie = np.maximum(in_end, comp_hist[back]) + a
        ce = np.maximum(np.maximum(ie, comp_end), out_hist[back]) + b
        oe = np.maximum(ce, out_end) + c
        in_end = np.where(active, ie, in_end)
        comp_end = np.where(active, ce, comp_end)
        out_end = np.where(active, oe, out_end)
        comp_hist.append(comp_end)
        out_hist.append(out_end)

    for i in range(min(WARMUP, int(ntiles.max(initial=0)))):
        step(i, i < ntiles, ntiles - 1 == i)
    long = ntiles > WARMUP
    if long.any():
        period = (out_hist[WARMUP] - out_hist[WARMUP - PERIOD]) / PERIOD  # steady-state time per tile
        skip = np.where(long, (ntiles - WARMUP - 1) // PERIOD * PERIOD, 0)
        shift = skip * period
        in_end, comp_end, out_end = in_end + shift, comp_end + shift, out_end + shift
        comp_hist = [zero] + [h + shift for h in comp_hist[1:]]
        out_hist = [zero] + [h + shift for h in out_hist[1:]]
        remaining = ntiles - WARMUP - skip
        for j in range(PERIOD):
            step(WARMUP + j, long & (j < remaining), long & (remaining - 1 == j))
    return out_end


def l2_hit(kernel: ElementwiseKernel, soc: SocProfile, n: np.ndarray, l2: L2State) -> np.ndarray:
    """The share of each launch's traffic (n elements per launch) that hits L2 in the given state."""
    footprint = kernel.hbm_bytes(np.asarray(n, dtype=float))
    if l2 == "steady":
        return SteadyL2(soc.l2_half_bytes, soc.l2_falloff, soc.l2_bytes).hit(footprint)
    if isinstance(l2, SteadyL2):
        return l2.hit(footprint)
    if l2:
        return resident_share(footprint, soc.l2_bytes)
    return np.zeros_like(footprint)


@dataclass(frozen=True)
class _Costs:
    """What a launch costs apart from the pipeline schedule: per-tile stage times and the byte traffic."""

    full: tuple[np.ndarray, np.ndarray, np.ndarray]  # (M, 3) CopyIn, Compute, CopyOut of a full tile
    tail: tuple[np.ndarray, np.ndarray, np.ndarray]  # (M, 3) the same for the last tile
    row_us: np.ndarray  # (M,) the last-dim rows' copies into the workspace, once per core
    bytes_moved: np.ndarray
    bandwidth_us: np.ndarray
    roofline_us: np.ndarray
    launched: np.ndarray


def _costs(kernel: ElementwiseKernel, k: CoreKinds, soc: SocProfile, n: np.ndarray, l2: L2State) -> _Costs:
    elem = kernel.elem_bytes
    m = k.tiles.shape[0]
    active = np.maximum(k.block_dim, 1).astype(float)
    hbm = soc.hbm_gbps
    n = np.asarray(n, dtype=float)
    hit = l2_hit(kernel, soc, n, l2) * np.ones(m)
    agg = 1.0 / ((1.0 - hit) / hbm + hit / soc.l2_gbps)
    agg_peak = 1.0 / ((1.0 - hit) / soc.hbm_peak_gbps + hit / soc.l2_peak_gbps)
    share = (agg / active)[:, None] * np.ones((1, 3))
    l2_share = (soc.l2_gbps / active)[:, None] * np.ones((1, 3))

    def stage(elems: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        nbytes = elems * elem
        dense = len(kernel.full_inputs) - kernel.row_inputs - kernel.workspace_inputs
        cin = dense * copy_us(nbytes, soc.mte2_curve_kib_us, share, k.aligned, soc.misaligned_bw_factor)
        if kernel.workspace_inputs:  # a window of the core's row in L2, at any phase: misaligned
            cin = cin + kernel.workspace_inputs * copy_us(
                nbytes, soc.mte2_curve_kib_us, l2_share, False, soc.misaligned_bw_factor
            )
        if kernel.row_inputs:  # the row values start anywhere in GM: misaligned
            values = row_values(elems, float(kernel.row_len)) * elem
            cin = cin + kernel.row_inputs * copy_us(
                values, soc.mte2_curve_kib_us, share, False, soc.misaligned_bw_factor
            )
        if kernel.scalar_queue_bytes:
            cin = cin + np.where(
                elems > 0,
                copy_us(np.full_like(nbytes, kernel.scalar_queue_bytes), soc.mte2_curve_kib_us, share, True, 1.0),
                0.0,
            )
        vec = vector_us(kernel, elems, soc)
        cout = len(kernel.outputs) * copy_us(nbytes, soc.mte3_curve_kib_us, share, k.aligned, soc.misaligned_bw_factor)
        return cin, vec, cout

    tile = np.repeat(k.tile_elems[:, None], 3, axis=1)
    full = stage(np.where(k.tiles > 1, tile, 0))
    tail = stage(k.tail)
    row_us = kernel.workspace_inputs * copy_us(
        np.full(m, kernel.row_bytes), soc.mte2_curve_kib_us, share[:, 0], True, 1.0
    )

    # byte counts in float64: streams x n x 8 B passes int64 for n above ~1e17 (exact below 2**53)
    covered = (k.cores * k.elems).sum(axis=1).astype(float)
    scalar_bytes: np.ndarray | float = float(len(kernel.scalar_inputs) * elem)
    if kernel.scalar_queue_bytes:
        scalar_bytes = (k.cores * k.tiles).sum(axis=1).astype(float) * kernel.scalar_queue_bytes
    bytes_moved = kernel.hbm_bytes(covered) + scalar_bytes + k.block_dim * (kernel.workspace_inputs * kernel.row_bytes)
    misaligned = 1.0 - (k.cores * ~k.aligned).sum(axis=1) / np.maximum(k.cores.sum(axis=1), 1) * (
        1.0 - soc.misaligned_bw_factor
    )
    bandwidth_us = bytes_moved / (agg * 1e3 * misaligned)
    launched = k.block_dim > 0
    roofline = np.where(launched, soc.launch_us + bytes_moved / (agg_peak * 1e3), 0.0)
    return _Costs(full, tail, row_us, bytes_moved, bandwidth_us, roofline, launched)


def simulate(
    kernel: ElementwiseKernel, k: CoreKinds, soc: SocProfile, n: np.ndarray, l2: L2State = DEFAULT_L2
) -> BatchResult:
    """Predict M tilings of one kernel; ``n`` is the element count per tiling."""
    return _schedule(k, _costs(kernel, k, soc, n, l2), soc)


def _schedule(k: CoreKinds, c: _Costs, soc: SocProfile) -> BatchResult:
    """The pipeline schedule of each core kind on top of the stage costs, and the launch's time."""
    m = k.tiles.shape[0]
    full, tail = c.full, c.tail
    bn = np.repeat(k.buffer_num[:, None], 3, axis=1).ravel()
    live = ((k.cores > 0) & (k.tiles > 0)).ravel()
    end = np.zeros(m * 3)
    end[live] = pipeline(
        k.tiles.ravel()[live], tuple(s.ravel()[live] for s in full), tuple(s.ravel()[live] for s in tail), bn[live]
    )
    end = end.reshape(m, 3)
    per_core = np.where((k.cores > 0) & (k.tiles > 0), end + soc.core_start_us + c.row_us[:, None], 0.0)
    slowest = per_core.argmax(axis=1)
    core_us = per_core[np.arange(m), slowest]
    nfull = np.maximum(k.tiles - 1, 0)
    busy = np.stack([nfull * f + np.where(k.tiles > 0, t, 0.0) for f, t in zip(full, tail, strict=True)], axis=2)
    busy = busy[np.arange(m), slowest]
    predicted = np.where(c.launched, soc.launch_us + np.maximum(core_us, c.bandwidth_us), 0.0)
    return BatchResult(predicted, core_us, c.bandwidth_us, busy, c.bytes_moved, c.roofline_us)


def bounds_us(
    kernel: ElementwiseKernel, k: CoreKinds, soc: SocProfile, n: np.ndarray, l2: L2State = DEFAULT_L2
) -> tuple[np.ndarray, np.ndarray]:
    """A lower bound on ``simulate(...).predicted_us`` per tiling without the pipeline schedule, and
    where that bound *is* the prediction, to the bit. Cheap enough to bound a whole space and simulate
    only what can win (``space.score_space(top=...)``).

    Lower: each core's last CopyOut ends no earlier than its longest chain of stages: all CopyIns then
    the last tile's Compute and CopyOut; the first CopyIn, all Computes, the last CopyOut; the first
    CopyIn and Compute, all CopyOuts; and the buffer cycles (tile i's CopyIn waits for tile i-bn's
    Compute, its Compute for tile i-bn's CopyOut).

    Exact where every core runs one tile (the schedule is that chain, summed in the same order), or
    where the byte traffic decides: the periodic schedule with period P = max(a, b, c, (a+b)/bn,
    (b+c)/bn) meets every constraint, so a core ends by (tiles-1) P + a + b + c; when that is still
    below the traffic's time, the prediction is launch + traffic, which the lower bound is too."""
    return _bounds(k, _costs(kernel, k, soc, n, l2), soc)


def _bounds(k: CoreKinds, c: _Costs, soc: SocProfile) -> tuple[np.ndarray, np.ndarray]:
    (a, b, cc), (ta, tb, tc) = c.full, c.tail
    nfull = np.maximum(k.tiles - 1, 0)
    single = k.tiles <= 1
    a1, b1 = np.where(single, ta, a), np.where(single, tb, b)
    bn = k.buffer_num[:, None]
    hops = nfull // bn
    chain = np.maximum.reduce(
        [
            nfull * a + ta + tb + tc,
            a1 + nfull * b + tb + tc,
            a1 + b1 + nfull * cc + tc,
            hops * (a + b) + ta + tb + tc,
            a1 + hops * (b + cc) + tb + tc,
            nfull * a + b + cc + tc,  # the staircases that turn at the last full tile (its tail is small)
            nfull * a + b + tb + tc,
            a + nfull * b + cc + tc,
        ]
    )
    live = (k.cores > 0) & (k.tiles > 0)
    fixed = soc.core_start_us + c.row_us[:, None]
    lower = np.where(
        c.launched,
        soc.launch_us
        + np.maximum(np.where(live, chain + soc.core_start_us + c.row_us[:, None], 0.0).max(axis=1), c.bandwidth_us),
        0.0,
    )  # fmt: skip  (the chain plus start-up and row copy in the schedule's order: equal to the bit when certain)
    fa, fb, fc = np.maximum(a, ta), np.maximum(b, tb), np.maximum(cc, tc)
    period = np.maximum.reduce([fa, fb, fc, (fa + fb) / bn, (fb + fc) / bn])
    upper = np.where(live, nfull * period + fa + fb + fc + fixed, 0.0).max(axis=1)
    traffic_decides = upper * (1 + BOUND_SLACK) + BOUND_SLACK < c.bandwidth_us
    return lower, ~c.launched | (single | ~live).all(axis=1) | traffic_decides  # a kind with no core runs nothing


def knob_factors(
    kernel: ElementwiseKernel, soc: SocProfile, block: np.ndarray, bn: np.ndarray, tile: np.ndarray, cores: np.ndarray
) -> np.ndarray:
    """The SoC's knob correction of each configuration (engine KnobFactor): ((block class x BUFFER_NUM) x
    tile alignment class) x cores that run, 1 for a kernel it does not apply to. What score_space's
    predictions carry."""
    c = soc.knob_correction
    m = np.shape(block)
    if c.identity or not kernel.knob_corrected:
        return np.ones(m)
    b = np.asarray(block, dtype=np.int64)
    bits = np.zeros(m, dtype=np.int64)
    for e in range(1, 16):  # the power of two at or below the block
        bits = np.where(b >= (1 << e), e, bits)
    t = np.asarray(tile, dtype=np.int64)
    align = np.zeros(m, dtype=np.int64)
    for cls in (1, 2, 3):
        align = np.where(t % (512 << cls) == 0, cls, align)
    n = np.clip(np.asarray(bn, dtype=np.int64), 0, 4)
    k = np.clip(np.asarray(cores, dtype=np.int64), 0, 64)
    factors: np.ndarray = np.asarray(c.block)[bits] * np.asarray(c.buffer)[n] * np.asarray(c.align)[align]
    factors = factors * np.asarray(c.cores)[k]
    return factors


def residual_factors(
    kernel: ElementwiseKernel,
    soc: SocProfile,
    n: int,
    block: np.ndarray,
    bn: np.ndarray,
    tile: np.ndarray,
    cores: np.ndarray,
) -> np.ndarray:
    """The SoC's learned residual of each configuration at ``n`` elements (engine ResidualFactor): its
    levels' factors multiplied in feature order, 1 for a kernel it does not apply to. score_space's
    predictions carry ``knob_factors * residual_factors``."""
    m = np.shape(block)
    if soc.residual.identity or not kernel.knob_corrected:
        return np.ones(m)
    lv = levels(n, kernel.elem_bytes, np.asarray(block), np.asarray(bn), np.asarray(tile), np.asarray(cores))
    table = np.asarray(soc.residual.table())
    factors = np.ones(m)
    for j, off in enumerate(OFFSETS):
        factors = factors * table[off + lv[:, j]]
    return factors
