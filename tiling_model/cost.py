"""Predicted device time of one launch (the pipeline simulator behind a per-tiling API).

``predict(t)`` and ``predict_detail(t)`` run ``simulate`` for one tiling; ``score_space``
scores every configuration of the search space for one shape in a single vectorised call.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tiling_model.simulate import DEFAULT_L2, GM_ALIGN_BYTES, CoreKinds, L2State, l2_hit, simulate
from tiling_model.soc import SocProfile, load_soc
from tiling_model.tiling import TilingData

PIPES = ("mte2", "vector", "mte3")


@dataclass(frozen=True)
class Prediction:
    predicted_us: float
    roofline_us: float  # launch + bytes moved over the HBM bandwidth: the physical limit
    fraction_of_roofline: float  # roofline_us / predicted_us (1.0 = at the limit)
    bottleneck: str  # "launch", "hbm", "mte2", "vector" or "mte3"
    bytes_moved: int
    achieved_gbps: float
    core_us: float  # slowest core, start-up included
    bandwidth_us: float  # bytes moved over the aggregate bandwidth
    busy_us: dict[str, float]  # per pipe, slowest core

    def as_dict(self) -> dict[str, object]:
        return {
            "predicted_us": round(self.predicted_us, 4),
            "roofline_us": round(self.roofline_us, 4),
            "fraction_of_roofline": round(self.fraction_of_roofline, 4),
            "bottleneck": self.bottleneck,
            "bytes_moved": self.bytes_moved,
            "achieved_gbps": round(self.achieved_gbps, 2),
            "core_us": round(self.core_us, 4),
            "bandwidth_us": round(self.bandwidth_us, 4),
            "busy_us": {k: round(v, 4) for k, v in self.busy_us.items()},
        }


def kinds_of(t: TilingData) -> CoreKinds:
    """The per-kind work of one tiling, in closed form from the struct: what ``core_plan`` gives core by
    core (big cores below tailBlockNum, small ones after, core block_dim-1 the last), without building
    it (tests/test_cost.py compares the two)."""
    f, elem, bd = t.fields, t.elem_bytes, t.block_dim
    if bd == 0:
        zero = np.zeros((1, 3), dtype=np.int64)
        return CoreKinds(zero, zero, zero, zero, np.ones((1, 3), dtype=bool), np.array([f.tileDataNum]),
                         np.array([t.params.buffer_num]), np.array([0]))  # fmt: skip
    big_n = min(f.tailBlockNum, bd - 1)  # core bd-1 is the last core, whatever its index says
    small_n = max(bd - 1 - f.tailBlockNum, 0)
    small_start = f.bigCoreDataNum * f.tailBlockNum
    last_start = f.bigCoreDataNum * (bd - 1) if bd - 1 < f.tailBlockNum else small_start + f.smallCoreDataNum * small_n

    def ok(x: int) -> bool:
        return (x * elem) % GM_ALIGN_BYTES == 0

    tile_ok = ok(f.tileDataNum)
    aligned = [
        big_n == 0 or (tile_ok and (big_n <= 1 or ok(f.bigCoreDataNum))),
        small_n == 0 or (tile_ok and ok(small_start) and (small_n <= 1 or ok(f.smallCoreDataNum))),
        tile_ok and ok(last_start),
    ]
    present = [big_n > 0, small_n > 0, True]
    rows = [
        (big_n, f.bigCoreDataNum, f.finalBigTileNum, f.bigTailDataNum),
        (small_n, f.smallCoreDataNum, f.finalSmallTileNum, f.smallTailDataNum),
        (1, f.lastCoreDataNum, f.lastCoreTileNum, f.lastCoreTailDataNum),
    ]
    cores, elems, tiles, tail = (
        np.array([[r[j] if p else 0 for r, p in zip(rows, present, strict=True)]]) for j in range(4)
    )
    return CoreKinds(
        cores,
        elems,
        tiles,
        tail,
        np.array([aligned]),
        np.array([f.tileDataNum]),
        np.array([t.params.buffer_num]),
        np.array([bd]),
    )


def exact_bytes_moved(t: TilingData, k: CoreKinds) -> int:
    """Bytes one launch moves, in Python ints (the simulator's float64 is exact only below 2**53)."""
    kernel = t.kernel
    covered = sum(int(c) * int(e) for c, e in zip(k.cores[0], k.elems[0], strict=True))
    scalar = len(kernel.scalar_inputs) * t.elem_bytes
    if kernel.scalar_queue_bytes:
        scalar = sum(int(c) * int(n) for c, n in zip(k.cores[0], k.tiles[0], strict=True)) * kernel.scalar_queue_bytes
    rows = kernel.row_inputs * -(-covered // kernel.row_len) if kernel.row_inputs else 0  # ceil(n / R) values
    dense = kernel.hbm_streams * covered
    return (dense + rows) * t.elem_bytes + scalar + t.block_dim * kernel.workspace_inputs * kernel.row_bytes


def predict_detail(t: TilingData, soc: SocProfile | None = None, warm_l2: L2State = DEFAULT_L2) -> Prediction:
    """The prediction of one tiling and where its time goes: compiled (``tiling_model.compiled``) once
    the process has warmed it up, else ``simulate``; the same arithmetic, tests/test_compiled.py
    compares them to the bit."""
    from tiling_model import compiled  # numba compiles on first use, not at import

    profile = soc or load_soc(t.soc)
    k = kinds_of(t)
    if compiled.ready():
        us, core_us, bandwidth_us, b0, b1, b2, _, roof, *_ = compiled.evaluate(
            t.kernel, profile, k.cores[0], k.elems[0], k.tiles[0], k.tail[0], k.aligned[0],
            int(k.tile_elems[0]), int(k.buffer_num[0]), int(k.block_dim[0]),
            float(l2_hit(t.kernel, profile, np.array([t.n]), warm_l2)[0]),
        )  # fmt: skip
    else:  # the NumPy simulator: the same numbers to the bit (tests/test_compiled.py)
        r = simulate(t.kernel, k, profile, np.array([t.n]), warm_l2)
        us, core_us, bandwidth_us, roof = (
            float(x[0]) for x in (r.predicted_us, r.core_us, r.bandwidth_us, r.roofline_us)
        )
        b0, b1, b2 = (float(x) for x in r.busy_us[0])
    busy = (b0, b1, b2)
    if us == 0.0 or profile.launch_us >= max(core_us, bandwidth_us):
        bottleneck = "launch"
    elif bandwidth_us >= core_us:
        bottleneck = "hbm"
    else:
        bottleneck = PIPES[int(np.argmax(busy))]
    moved = exact_bytes_moved(t, k)
    return Prediction(
        predicted_us=us,
        roofline_us=roof,
        fraction_of_roofline=roof / us if us else 1.0,
        bottleneck=bottleneck,
        bytes_moved=moved,
        achieved_gbps=moved / us / 1e3 if us else 0.0,
        core_us=core_us,
        bandwidth_us=bandwidth_us,
        busy_us=dict(zip(PIPES, busy, strict=True)),
    )


def predict(t: TilingData, soc: SocProfile | None = None, warm_l2: L2State = DEFAULT_L2) -> float:
    """Predicted kernel time of ``t`` in microseconds (0 for an empty tensor: no launch)."""
    return predict_detail(t, soc, warm_l2).predicted_us
