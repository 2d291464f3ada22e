"""Predicted device time of one launch: the engine's prediction behind a per-tiling API.

``predict(t)`` and ``predict_detail(t)`` ask the engine (``tiling_model.engine``, the C++ model the build
compiles) for one tiling of any scheme; ``space.score_space`` scores a whole search space with it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tiling_model import _engine, engine
from tiling_model.model_types import DEFAULT_L2, CoreKinds, L2State
from tiling_model.soc import SocProfile, load_soc
from tiling_model.tiling import TilingData, astuple_fields

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


def engine_kinds(t: TilingData) -> engine.Kinds:
    """The per-kind work of one tiling of any scheme, as the kernel reads its struct (the engine's
    ``KindsOfData``: big cores below tailBlockNum, small ones after, core block_dim-1 the last)."""
    return _engine.kinds_of_struct(astuple_fields(t.fields), t.block_dim, t.elem_bytes)


def kinds_of(t: TilingData) -> CoreKinds:
    """``engine_kinds`` as the vectorised specification's one-row CoreKinds (what ``simulate`` reads)."""
    k = engine_kinds(t)
    return CoreKinds(
        np.array([k.counts]),
        np.array([k.elems]),
        np.array([k.tiles]),
        np.array([k.tail]),
        np.array([k.aligned]),
        np.array([t.fields.tileDataNum]),
        np.array([t.params.buffer_num]),
        np.array([k.cores]),
    )


def predict_detail(t: TilingData, soc: SocProfile | None = None, l2: L2State = DEFAULT_L2) -> Prediction:
    """The prediction of one tiling and where its time goes (the engine's ``Evaluate``; the
    specification ``simulate`` gives the same numbers to the bit, tests/tiling_model/test_engine.py)."""
    profile = soc or load_soc(t.soc)
    k = engine_kinds(t)
    p = engine.evaluate(t.kernel, profile, k, t.fields.tileDataNum, t.params.buffer_num, t.n, l2)
    us, core_us, bandwidth_us, roof, busy = p.us, p.core_us, p.bandwidth_us, p.roofline_us, p.busy_us
    us = us * _config_factor(t, profile, k)
    if us == 0.0 or profile.launch_us >= max(core_us, bandwidth_us):
        bottleneck = "launch"
    elif bandwidth_us >= core_us:
        bottleneck = "hbm"
    else:
        bottleneck = PIPES[busy.index(max(busy))]  # the first of the busiest, as np.argmax
    moved = int(p.bytes_moved)  # the engine's count: exact below 2**53 bytes (8 PiB), the nearest double above
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


def predict_with_roofline(
    t: TilingData, soc: SocProfile | None = None, l2: L2State = DEFAULT_L2
) -> tuple[float, float]:
    """``predict_detail``'s predicted and roofline times alone (what an answer of the service carries)."""
    profile = soc or load_soc(t.soc)
    k = engine_kinds(t)
    p = engine.evaluate(t.kernel, profile, k, t.fields.tileDataNum, t.params.buffer_num, t.n, l2)
    return p.us * _config_factor(t, profile, k), p.roofline_us


def _config_factor(t: TilingData, soc: SocProfile, kinds: engine.Kinds) -> float:
    """The device's knob correction and residual of this tiling's prediction (1: none, or not bcetune's
    exact kernel)."""
    if t.scheme != "exact":
        return 1.0
    p = t.params
    return engine.config_factor(t.kernel, soc, kinds, p.block_bytes, p.buffer_num, p.tile_bytes)


def predict(t: TilingData, soc: SocProfile | None = None, l2: L2State = DEFAULT_L2) -> float:
    """Predicted kernel time of ``t`` in microseconds (0 for an empty tensor: no launch)."""
    return predict_detail(t, soc, l2).predicted_us
