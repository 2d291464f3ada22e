"""Predicted device time of one launch (the pipeline simulator behind a per-tiling API).

``predict(t)`` and ``predict_detail(t)`` run ``simulate`` for one tiling; ``score_space``
scores every configuration of the search space for one shape in a single vectorised call.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tiling_model.plan import core_plan
from tiling_model.simulate import GM_ALIGN_BYTES, KINDS, BatchResult, CoreKinds, L2State, simulate
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
    """The per-kind work of one tiling, read from its per-core plan."""
    plans = core_plan(t)
    elem = t.elem_bytes
    tile_ok = (t.fields.tileDataNum * elem) % GM_ALIGN_BYTES == 0
    cores, elems, tiles, tail, aligned = ([0] * 3 for _ in range(5))
    for i, kind in enumerate(KINDS):
        group = [c for c in plans if c.kind == kind]
        if not group:
            aligned[i] = True
            continue
        cores[i], elems[i], tiles[i], tail[i] = len(group), group[0].count, group[0].tiles, group[0].tail_elems
        aligned[i] = tile_ok and all((c.start * elem) % GM_ALIGN_BYTES == 0 for c in group)
    return CoreKinds(
        np.array([cores]),
        np.array([elems]),
        np.array([tiles]),
        np.array([tail]),
        np.array([aligned]),
        np.array([t.fields.tileDataNum]),
        np.array([t.params.buffer_num]),
        np.array([t.block_dim]),
    )


def exact_bytes_moved(t: TilingData, k: CoreKinds) -> int:
    """Bytes one launch moves, in Python ints (the simulator's float64 is exact only below 2**53)."""
    kernel = t.kernel
    covered = sum(int(c) * int(e) for c, e in zip(k.cores[0], k.elems[0], strict=True))
    scalar = len(kernel.scalar_inputs) * t.elem_bytes
    if kernel.scalar_queue_bytes:
        scalar = sum(int(c) * int(n) for c, n in zip(k.cores[0], k.tiles[0], strict=True)) * kernel.scalar_queue_bytes
    return kernel.streams * covered * t.elem_bytes + scalar + t.block_dim * kernel.row_bytes


def _bottleneck(r: BatchResult, i: int, soc: SocProfile) -> str:
    if r.predicted_us[i] == 0.0:
        return "launch"
    body = max(r.core_us[i], r.bandwidth_us[i])
    if soc.launch_us >= body:
        return "launch"
    if r.bandwidth_us[i] >= r.core_us[i]:
        return "hbm"
    return PIPES[int(np.argmax(r.busy_us[i]))]


def predict_detail(t: TilingData, soc: SocProfile | None = None, warm_l2: L2State = False) -> Prediction:
    profile = soc or load_soc(t.soc)
    kinds = kinds_of(t)
    r = simulate(t.kernel, kinds, profile, np.array([t.n]), warm_l2)
    us = float(r.predicted_us[0])
    roof = float(r.roofline_us[0])
    moved = exact_bytes_moved(t, kinds)
    return Prediction(
        predicted_us=us,
        roofline_us=roof,
        fraction_of_roofline=roof / us if us else 1.0,
        bottleneck=_bottleneck(r, 0, profile),
        bytes_moved=moved,
        achieved_gbps=moved / us / 1e3 if us else 0.0,
        core_us=float(r.core_us[0]),
        bandwidth_us=float(r.bandwidth_us[0]),
        busy_us=dict(zip(PIPES, (float(x) for x in r.busy_us[0]), strict=True)),
    )


def predict(t: TilingData, soc: SocProfile | None = None, warm_l2: L2State = False) -> float:
    """Predicted kernel time of ``t`` in microseconds (0 for an empty tensor: no launch)."""
    return predict_detail(t, soc, warm_l2).predicted_us
