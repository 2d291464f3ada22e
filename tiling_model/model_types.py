"""The terms the cost model's two implementations share: its constants, the L2 state a prediction
assumes, a tiling's core kinds and a batch's result. The specification (``simulate``) and the engine's
wrapper (``engine``, ``cost``, ``space``) both import them from here, so the specification is only the
model and can be edited as one; tests/tiling_model/test_engine.py holds the compiled engine's constants
equal to these."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from tiling_model.kernels import CYCLES_PER_REPEAT

WARMUP = 24
PERIOD = 12  # a multiple of every possible steady-state cyclicity (buffer_num <= 4)
REPEAT_BYTES = 256
GM_ALIGN_BYTES = 512
BOUND_SLACK = 1e-9  # relative and absolute (us): the simulator's period jump is exact to float rounding
# A lower bound and the prediction it bounds agree to float rounding (seen: 5e-9 us, 1e-15 relative):
# pruning treats a bound as below a prediction unless it passes it by more than this.
PRUNE_MARGIN_US = 1e-6
PRUNE_RELATIVE = 1e-12
KINDS = ("big", "small", "last")
DUP_CYCLES = CYCLES_PER_REPEAT["duplicate"]


@dataclass(frozen=True)
class SteadyL2:
    """L2 in the steady state of repeated launches after warm-up (what profilers report): the share of
    a launch's traffic that hits L2 falls with its footprint F (bytes read and written) as
    1 / (1 + (F / half_bytes) ** falloff), half_bytes and falloff fitted per SoC, and never above the
    share of the footprint the L2 can hold, min(1, l2_bytes / F) (the warm state): a curve whose half
    point lies past the L2 size still cannot make more bytes hit than are resident."""

    half_bytes: float
    falloff: float
    l2_bytes: float

    def hit(self, footprint: np.ndarray) -> np.ndarray:
        f = np.asarray(footprint, dtype=float)
        ratio: np.ndarray = f / self.half_bytes
        # the C library's pow, as the engine's std::pow: NumPy's own vectorised power (AVX-512 builds) can
        # differ from it in the last bit, and a prediction must be the engine's to the bit
        unique, where = np.unique(ratio, return_inverse=True)
        powered = np.array([math.pow(r, self.falloff) for r in unique.tolist()], dtype=float)
        powered = powered[where].reshape(ratio.shape)
        share: np.ndarray = np.minimum(1.0 / (1.0 + powered), resident_share(f, self.l2_bytes))
        return share


def resident_share(footprint: np.ndarray, l2_bytes: float) -> np.ndarray:
    """The share of a footprint the L2 can hold: what hits when L2 is warm, the most any state hits."""
    share: np.ndarray = np.minimum(1.0, l2_bytes / np.maximum(np.asarray(footprint, dtype=float), 1.0))
    return share


#: The L2 state a prediction assumes: False = cold (first touch, all HBM: the default), "steady" (the
#: SoC profile's fitted steady state of repeated launches, what profilers report when they repeat a
#: launch), True = warm (the share of the footprint that fits in L2 hits), or an explicit steady-state
#: curve (fitting). Cold is what bcetune tunes for: in training the kernel's inputs (the forward's
#: probabilities, the labels) were written long before the backward pass reads them, and the NPU
#: backend times it so (L2 flushed before every sample); the engine's kDefaultL2 says the same.
L2State = bool | SteadyL2 | Literal["steady"]
DEFAULT_L2: L2State = False
#: The L2 states by name, as the CLI flags and measurement records spell them.
L2_STATES: dict[str, L2State] = {"steady": "steady", "cold": False, "warm": True}


@dataclass(frozen=True)
class CoreKinds:
    """Per tiling (arrays of length M), per core kind (axis 1: big, small, last)."""

    cores: np.ndarray  # (M, 3) number of cores of the kind
    elems: np.ndarray  # (M, 3) elements per core
    tiles: np.ndarray  # (M, 3)
    tail: np.ndarray  # (M, 3) elements in the last tile
    aligned: np.ndarray  # (M, 3) bool: every copy of the kind starts 512-B aligned in GM
    tile_elems: np.ndarray  # (M,)
    buffer_num: np.ndarray  # (M,)
    block_dim: np.ndarray  # (M,)


@dataclass(frozen=True)
class BatchResult:
    predicted_us: np.ndarray
    core_us: np.ndarray  # slowest core incl. start-up
    bandwidth_us: np.ndarray  # bytes over aggregate bandwidth
    busy_us: np.ndarray  # (M, 3): MTE2, V, MTE3 busy time of the slowest core
    bytes_moved: np.ndarray
    roofline_us: np.ndarray  # launch + bytes over the peak bandwidth (HBM; with warm L2, the L2 mix)
