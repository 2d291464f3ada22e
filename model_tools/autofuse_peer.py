"""CANN's own auto-tiling cost model, as a peer to ours: the same tilings, timed its way.

CANN's graph compiler tiles the kernels it fuses (autofuse) with a cost model of its own ("ATT", the
``ge`` repository: ``compiler/graph/optimize/autofuse/att``, the A2 table ``api_perf_register/v1/
perf_param_v1.cpp`` and its composition in ``expr_gen/pipe_perf_expr.cpp`` and the solver generator;
read at hicann/ge commit 410e2e6cc). Re-implemented here from the constants it publishes and the
composition its code states (no code taken):

- a load of ``B`` bytes on one core costs ``B / (a + b / block_dim) + h`` cycles (``Load``: a 9.9074,
  b 15.896 bytes per cycle, h 27.01), a store the same with ``Store``'s (9.96, 3.79, 12.09);
- a vector API over ``n`` elements costs ``k * n + b`` cycles, per API and dtype pair;
- each pipe (MTE2, vector, MTE3) sums its calls over the core's tiles and adds its head (MTE2:
  ``32.72 * block_dim + 1575.03`` when a load reaches 25,000 bytes, else ``15.89 * block_dim +
  882.09``; MTE3 497.36; vector 37.37);
- a launch costs the slowest pipe plus 300 cycles per core used (the op head cost times the core count).

Assumptions (ours, where the model needs an input it does not define here):
- the tiling is bcetune's reading of the operator (the model's default tiling of each launch, the
  slowest kind of core), not one ATT's solver would pick: both models time the same tiling;
- cycles are AIV cycles at the SoC profile's clock (1800 MHz on the 910B2);
- half types compute in float32 as our reading does: ``cast`` up is ATT's Cast float16 -> float32, down
  its float32 -> float16 (bfloat16 takes the float16 rows: the table has none of its own);
- ``compare`` is CompareScalarGT, ``rec`` Reciprocal; ``ln``, ``gather`` and ``reduce_sum``, which the
  table lacks or prices otherwise, fall back to Exp, Gather and WholeReduceSum;
- no L2: ATT's load rate does not depend on where the data is (the model has no cache term).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from model_tools.calibrate import Measured
from tiling_model.cost import engine_kinds
from tiling_model.soc import SocProfile
from tiling_model.tiling import TilingData

#: (k cycles per element, b cycles) of each vector API, float32 and float16 operands (perf_param_v1.cpp).
VECTOR_KB: dict[str, dict[int, tuple[float, float]]] = {
    "add": {4: (0.0206, 23.2225), 2: (0.0103, 22.2173)},
    "sub": {4: (0.0213, 22.1254), 2: (0.0107, 22.1226)},
    "mul": {4: (0.0206, 23.2291), 2: (0.0110, 23.1243)},
    "div": {4: (0.0454, 29.0892), 2: (0.0460, 29.1233)},
    "max": {4: (0.0215, 20.1333), 2: (0.0111, 20.1200)},
    "min": {4: (0.0215, 20.1271), 2: (0.0111, 20.1104)},
    "adds": {4: (0.0141, 22.0936), 2: (0.0071, 22.0938)},
    "muls": {4: (0.0142, 23.0966), 2: (0.0071, 23.1006)},
    "maxs": {4: (0.0141, 20.0887), 2: (0.0071, 20.0912)},
    "mins": {4: (0.0142, 20.0876), 2: (0.0071, 20.0896)},
    "abs": {4: (0.0147, 20.0592), 2: (0.0077, 20.0153)},
    "relu": {4: (0.0154, 20.0189), 2: (0.0077, 20.0173)},
    "rec": {4: (0.0146, 21.0639), 2: (0.0078, 21.0076)},
    "duplicate": {4: (0.0156, 16.9965), 2: (0.0078, 16.9993)},
    "exp": {4: (0.0307, 28.0376), 2: (0.0311, 28.0144)},
    "ln": {4: (0.0307, 28.0376), 2: (0.0311, 28.0144)},  # no Ln row: Exp's
    "sqrt": {4: (0.0313, 28.9961), 2: (0.0312, 29.0056)},
    "compare": {4: (0.0160, 21.9712), 2: (0.0084, 21.9200)},  # CompareScalarGT
    "select": {4: (0.0229, 43.9906), 2: (0.0118, 45.9656)},
    "gather": {4: (0.1875, 15.0000), 2: (0.1873, 17.0248)},
    "reduce_sum": {4: (0.1094, 32.0029), 2: (0.0547, 35.0021)},  # WholeReduceSum
    "cast": {4: (0.0147, 20.1204), 2: (0.0147, 20.1204)},  # Cast float16 -> float32
    "cast_f32_f16": {4: (0.0087, 20.4393), 2: (0.0087, 20.4393)},  # Cast float32 -> float16
}
LOAD = (9.9074, 15.8960, 27.01)  # a, b (bytes per cycle: a + b / block_dim), h (cycles)
STORE = (9.96, 3.79, 12.09)
MTE2_HEAD_NORMAL = (32.72, 1575.03)  # k * block_dim + b, a load of at least MTE2_HEAD_BYTES
MTE2_HEAD_SMALL = (15.89, 882.09)
MTE2_HEAD_BYTES = 25_000
MTE3_HEAD = 497.36
VECTOR_HEAD = 37.37
OP_HEAD_PER_CORE = 300.0


def _copy_cycles(nbytes: float, block_dim: int, rate: tuple[float, float, float]) -> float:
    a, b, h = rate
    return nbytes / (a + b / block_dim) + h


def pipe_cycles(t: TilingData) -> dict[str, float]:
    """The slowest kind of core's cycles per pipe (heads included) for one launch of ``t``."""
    k, kernel, elem = engine_kinds(t), t.kernel, t.elem_bytes
    bd, tile = t.block_dim, t.fields.tileDataNum
    ins, outs = len(kernel.full_inputs), len(kernel.outputs)
    busiest = {"mte2": 0.0, "vector": 0.0, "mte3": 0.0}
    largest_load = 0  # bytes of the largest load any core issues: it picks the MTE2 head
    for count, tiles, tail in zip(k.counts, k.tiles, k.tail, strict=True):
        if count == 0 or tiles == 0:
            continue
        largest_load = max(largest_load, (tile if tiles > 1 else tail) * elem)
        sizes = ((tiles - 1, tile), (1, tail))  # full tiles, then the last (the tail)
        mte2 = sum(c * ins * _copy_cycles(e * elem, bd, LOAD) for c, e in sizes)
        mte3 = sum(c * outs * _copy_cycles(e * elem, bd, STORE) for c, e in sizes)
        vec = 0.0
        for op in kernel.ops:
            kk, b = VECTOR_KB[op.name][4 if op.operand_bytes >= 4 else 2]
            vec += sum(c * (kk * e + b) for c, e in sizes)
        for pipe, v in (("mte2", mte2), ("vector", vec), ("mte3", mte3)):
            busiest[pipe] = max(busiest[pipe], v)
    head_k, head_b = MTE2_HEAD_NORMAL if largest_load >= MTE2_HEAD_BYTES else MTE2_HEAD_SMALL
    busiest["mte2"] += head_k * bd + head_b
    busiest["mte3"] += MTE3_HEAD
    busiest["vector"] += VECTOR_HEAD
    return busiest


def predict_us(t: TilingData, soc: SocProfile) -> float:
    """One launch: the slowest pipe plus the per-core op head, in microseconds at the SoC's clock."""
    if t.n == 0:
        return 0.0
    cycles = max(pipe_cycles(t).values()) + OP_HEAD_PER_CORE * t.block_dim
    return cycles / soc.clock_mhz


def errors(cases: Sequence[Measured], soc: SocProfile) -> np.ndarray:
    """predicted / measured - 1 of each measured call (its launches summed)."""
    return np.array([sum(predict_us(t, soc) for t in m.launches) / m.measured_us - 1.0 for m in cases])
