"""First cost model: predicted device time of one kernel launch, in microseconds.

Per core, each tile costs MTE2 copies (one per input stream read, interpolated on the
measured per-DMA curve), vector instructions (start cost plus 256-B repeats at the measured
cycles per repeat) and one MTE3 copy. With buffer_num = 1 the three stages of a tile run one
after the other; with buffer_num >= 2 they overlap, so a core costs the sum of each tile's
slowest stage plus the fill and drain of the first tile. The launch costs a fixed overhead and
can never beat the SoC's aggregate HBM bandwidth for the bytes it moves; copies whose GM start
is not 512-B aligned get the SoC's misalignment factor. L2 is treated as cold.

Deliberately simple; the pipeline simulator with calibration replaces it (issue 4).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tiling_model.dtypes import DTYPE_BYTES, FLOAT_DTYPES
from tiling_model.plan import core_plan
from tiling_model.soc import SocProfile, load_soc
from tiling_model.tiling import TilingData

#: Cycles per 256-B repeat on one 910B1 AIV (MSKPP, data/mskpp_vector_instr_910b1.csv):
#: binary ops 2.0, tensor-scalar ops 1.0, VCONV ~1.0 (fp32->fp16 0.49).
CYCLES_PER_REPEAT: dict[str, float] = {
    "sub": 2.0,
    "mul": 2.0,
    "add": 2.0,
    "muls": 1.0,
    "adds": 1.0,
    "cast_up": 1.0,
    "cast_down_f16": 0.49,
    "cast_down_bf16": 1.0,
}
REPEAT_BYTES = 256
GM_ALIGN_BYTES = 512


@dataclass(frozen=True)
class VectorOp:
    name: str
    operand_bytes: int  # bytes per element of the widest operand (sets the repeat count)


def vector_ops(t: TilingData) -> list[VectorOp]:
    """The vector instructions the kernel issues per tile for this variant."""
    elem = DTYPE_BYTES[t.dtype]
    layout = t.layout
    widen = t.scheme == "exact" and t.dtype in FLOAT_DTYPES and elem == 2
    work = 4 if widen else elem
    ops: list[VectorOp] = []
    if widen:
        ops += [VectorOp("cast_up", 4) for _ in layout.full_inputs]
    ops.append(VectorOp("sub", work))  # p - y
    ops.append(VectorOp("mul" if t.reduction == "none" else "muls", work))  # * grad
    if "weight" in layout.full_inputs:
        ops.append(VectorOp("mul", work))
    if widen:
        ops.append(VectorOp("cast_down_f16" if t.dtype == "float16" else "cast_down_bf16", 4))
    return ops


def _dma_us(curve: tuple[tuple[float, float], ...], nbytes: int) -> float:
    kib = np.array([p[0] for p in curve])
    us = np.array([p[1] for p in curve])
    x = nbytes / 1024
    if x <= kib[-1]:
        return float(np.interp(x, kib, us))
    slope = (us[-1] - us[-2]) / (kib[-1] - kib[-2])
    return float(us[-1] + (x - kib[-1]) * slope)


def _vector_us(ops: list[VectorOp], elems: int, soc: SocProfile) -> float:
    cycles = 0.0
    for op in ops:
        repeats = math.ceil(elems * op.operand_bytes / REPEAT_BYTES)
        cycles += soc.vector_start_cycles + repeats * CYCLES_PER_REPEAT[op.name]
    return cycles / soc.clock_mhz


@dataclass(frozen=True)
class Prediction:
    predicted_us: float
    core_us: float  # slowest core, pipelined
    bandwidth_us: float  # bytes moved over the aggregate HBM bandwidth
    bytes_moved: int
    bottleneck: str  # "launch", "cores" or "hbm"


def predict_detail(t: TilingData, soc: SocProfile | None = None) -> Prediction:
    profile = soc or load_soc(t.soc)
    if t.n == 0 or t.block_dim == 0:
        return Prediction(0.0, 0.0, 0.0, 0, "launch")
    layout = t.layout
    elem = t.elem_bytes
    ops = vector_ops(t)
    n_in = len(layout.full_inputs)
    n_out = len(layout.outputs)
    scalar_bytes = layout.scalar_queue_bytes or (elem if layout.scalar_inputs else 0)

    stage_cache: dict[int, tuple[float, float, float]] = {}

    def stages(elems: int) -> tuple[float, float, float]:
        if elems not in stage_cache:
            nbytes = elems * elem
            cin = n_in * _dma_us(profile.mte2_curve_kib_us, nbytes)
            if layout.scalar_queue_bytes:
                cin += _dma_us(profile.mte2_curve_kib_us, layout.scalar_queue_bytes)
            cout = n_out * _dma_us(profile.mte3_curve_kib_us, nbytes)
            stage_cache[elems] = (cin, _vector_us(ops, elems, profile), cout)
        return stage_cache[elems]

    plans = core_plan(t)
    core_times = []
    misaligned_cores = 0
    for c in plans:
        if c.tiles == 0:
            continue
        full, tail = stages(c.tile_elems), stages(c.tail_elems)
        nfull = c.tiles - 1
        if t.params.buffer_num == 1:
            time = nfull * sum(full) + sum(tail)
        else:
            first = full if nfull else tail
            time = nfull * max(full) + max(tail) + (sum(first) - max(first))
        core_times.append(time)
        if (c.start * elem) % GM_ALIGN_BYTES:
            misaligned_cores += 1
    tile_aligned = (t.fields.tileDataNum * elem) % GM_ALIGN_BYTES == 0
    misaligned_share = misaligned_cores / len(core_times) if tile_aligned else 1.0
    bw_factor = 1.0 - misaligned_share * (1.0 - profile.misaligned_bw_factor)
    covered = max(c.end for c in plans)
    bytes_moved = (n_in + n_out) * covered * elem + scalar_bytes * (
        1 if not layout.scalar_queue_bytes else sum(c.tiles for c in plans)
    )
    bandwidth_us = bytes_moved / (profile.hbm_gbps * 1e3 * bw_factor)
    core_us = max(core_times)
    body = max(core_us, bandwidth_us)
    bottleneck = "hbm" if bandwidth_us >= core_us else "cores"
    if profile.launch_us > body:
        bottleneck = "launch"
    return Prediction(profile.launch_us + body, core_us, bandwidth_us, bytes_moved, bottleneck)


def predict(t: TilingData, soc: SocProfile | None = None) -> float:
    """Predicted kernel time of ``t`` in microseconds (0 for an empty tensor: no launch)."""
    return predict_detail(t, soc).predicted_us
