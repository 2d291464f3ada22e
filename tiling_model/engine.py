"""The cost model's engine, from Python: the C++ model the CANN build compiles
(``tiling_model/include/bce_grad_cost_model.h`` and its re-fit ``bce_grad_refit.h``, ``INCLUDE_DIR``), bound with
nanobind as ``tiling_model._engine``.

Every single prediction, every re-fit and every whole-space scoring goes through here, so the service,
the tuner's seeding, the explorer and ``predict`` compute what the build computes, with the same code.
``simulate.py`` is the readable, vectorised specification the engine is tested against to the bit
(tests/tiling_model/test_engine.py). This module only translates: SoC profiles and kernel descriptions
into the engine's named structs (cached per object), L2 states into the engine's, arrays in and out.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from tiling_model import _engine
from tiling_model.kernels import ElementwiseKernel
from tiling_model.model_types import BatchResult, CoreKinds, L2State, SteadyL2
from tiling_model.soc import SocProfile

INCLUDE_DIR = Path(__file__).resolve().parent / "include"
"""The engine's C++ header: what the CANN build's host code, the C++ host tiling and the tests include."""

Kinds = _engine.Kinds

_CACHE_LIMIT = 4096
_lock = threading.Lock()
# By identity, with the object kept alive beside its model: profiles and kernels are frozen values
# handed out by cached constructors, and hashing one field by field costs more than a prediction.
_socs: dict[int, tuple[SocProfile, _engine.Soc]] = {}
_kernels: dict[int, tuple[ElementwiseKernel, _engine.Kernel]] = {}


def soc_model(soc: SocProfile) -> _engine.Soc:
    """The engine's model of a SoC profile (cached per profile object)."""
    hit = _socs.get(id(soc))
    if hit is not None and hit[0] is soc:
        return hit[1]
    model = _engine.Soc(
        name=soc.name,
        aiv_cores=soc.aiv_cores,
        launch_us=soc.launch_us,
        core_start_us=soc.core_start_us,
        vector_start_cycles=soc.vector_start_cycles,
        vector_mhz=soc.vector_mhz,
        misaligned_factor=soc.misaligned_bw_factor,
        hbm_gbps=soc.hbm_gbps,
        l2_gbps=soc.l2_gbps,
        hbm_peak_gbps=soc.hbm_peak_gbps,
        l2_peak_gbps=soc.l2_peak_gbps,
        l2_half_bytes=soc.l2_half_bytes,
        l2_falloff=soc.l2_falloff,
        l2_bytes=float(soc.l2_bytes),
        mte2_curve_kib_us=[(float(k), float(u)) for k, u in soc.mte2_curve_kib_us],
        mte3_curve_kib_us=[(float(k), float(u)) for k, u in soc.mte3_curve_kib_us],
        **_correction_args(soc),
    )
    with _lock:
        if len(_socs) >= _CACHE_LIMIT:
            _socs.clear()
        _socs[id(soc)] = (soc, model)
    return model


def _correction_args(soc: SocProfile) -> dict[str, list[float]]:
    c, args = soc.knob_correction, {}
    if not c.identity:
        args = {"block_factors": list(c.block), "buffer_factors": list(c.buffer), "align_factors": list(c.align),
                "core_factors": list(c.cores)}  # fmt: skip
    if not soc.residual.identity:
        args["residual_factors"] = list(soc.residual.table())
    return args


def kernel_model(kernel: ElementwiseKernel) -> _engine.Kernel:
    """The engine's model of a kernel description (cached per kernel object)."""
    hit = _kernels.get(id(kernel))
    if hit is not None and hit[0] is kernel:
        return hit[1]
    model = _engine.Kernel(
        elem_bytes=kernel.elem_bytes,
        full_inputs=len(kernel.full_inputs),
        outputs=len(kernel.outputs),
        scalar_inputs=len(kernel.scalar_inputs),
        row_bytes=kernel.row_bytes,
        ops=[(float(op.operand_bytes), float(op.cycles_per_repeat)) for op in kernel.ops],
        workspace_inputs=kernel.workspace_inputs,
        row_inputs=kernel.row_inputs,
        row_len=kernel.row_len,
        row_expand_bytes=kernel.row_expand_bytes,
        scalar_queue_bytes=kernel.scalar_queue_bytes,
        corrected=kernel.knob_corrected,
    )
    with _lock:
        if len(_kernels) >= _CACHE_LIMIT:
            _kernels.clear()
        _kernels[id(kernel)] = (kernel, model)
    return model


_STEADY = _engine.L2State(_engine.L2State.Kind.STEADY)
_COLD = _engine.L2State(_engine.L2State.Kind.COLD)
_WARM = _engine.L2State(_engine.L2State.Kind.WARM)


def l2_state(l2: L2State) -> _engine.L2State:
    """A prediction's L2 state (model_types.L2State) as the engine's."""
    if isinstance(l2, SteadyL2):
        return _engine.L2State(
            _engine.L2State.Kind.CURVE,
            half_bytes=l2.half_bytes,
            falloff=l2.falloff,
            l2_bytes=float(l2.l2_bytes),
        )
    if l2 == "steady":
        return _STEADY
    if isinstance(l2, bool):
        return _WARM if l2 else _COLD
    raise ValueError(f"unknown L2 state {l2!r}: 'steady', True (warm), False (cold) or a SteadyL2 curve")


def _models(
    kernel: ElementwiseKernel, soc: SocProfile, n: int, l2: L2State
) -> tuple[_engine.Kernel, _engine.Soc, float]:
    """The kernel's and the SoC's models, and the L2 hit share of a launch over ``n`` elements."""
    k, s = kernel_model(kernel), soc_model(soc)
    return k, s, _engine.l2_hit(k, s, int(n), l2_state(l2))


def evaluate(
    kernel: ElementwiseKernel,
    soc: SocProfile,
    kinds: _engine.Kinds,
    tile_elems: int,
    buffer_num: int,
    n: int,
    l2: L2State,
) -> _engine.Prediction:
    """One tiling's prediction from its core kinds (any scheme): simulate.simulate's row."""
    k, s, hit = _models(kernel, soc, n, l2)
    return _engine.evaluate(kinds, tile_elems, buffer_num, k, s, hit)


def pipelines(
    kernel: ElementwiseKernel,
    soc: SocProfile,
    kinds: _engine.Kinds,
    tile_elems: int,
    buffer_num: int,
    n: int,
    l2: L2State,
) -> tuple[list[tuple[tuple[float, float, float], tuple[float, float, float], float]], float]:
    """Per core kind (big, small, last): the full and the last tile's (CopyIn, Compute, CopyOut) and the
    end of its last CopyOut from the core's start; and the row copy every core makes first."""
    k, s, hit = _models(kernel, soc, n, l2)
    return _engine.pipelines(kinds, tile_elems, buffer_num, k, s, hit)


def knob_factor(
    kernel: ElementwiseKernel, soc: SocProfile, block: int, buffer_num: int, tile: int, cores: int
) -> float:
    """The SoC's knob correction of one configuration of ``kernel`` (``cores``: that run; 1: none, or not
    bcetune's kernel)."""
    if soc.knob_correction.identity or not kernel.knob_corrected:
        return 1.0
    k, s = kernel_model(kernel), soc_model(soc)
    return _engine.knob_factor(s, k, int(block), int(buffer_num), int(tile), int(cores))


def config_factor(
    kernel: ElementwiseKernel, soc: SocProfile, kinds: _engine.Kinds, block: int, buffer_num: int, tile: int
) -> float:
    """What an exact-scheme configuration's prediction is multiplied by (``kinds``: its core kinds): the
    SoC's knob correction times its residual; 1 without either, or for a kernel they do not apply to."""
    if (soc.knob_correction.identity and soc.residual.identity) or not kernel.knob_corrected:
        return 1.0
    k, s = kernel_model(kernel), soc_model(soc)
    return _engine.config_factor(s, k, kinds, int(block), int(buffer_num), int(tile))


def _column(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x, dtype=np.int64)


def score(
    kernel: ElementwiseKernel,
    soc: SocProfile,
    n: int,
    block: np.ndarray,
    bn: np.ndarray,
    tile: np.ndarray,
    cores: np.ndarray,
    l2: L2State,
) -> BatchResult:
    """Exact-scheme configurations (parallel arrays of knobs) at ``n`` elements, each simulated."""
    k, s, hit = _models(kernel, soc, n, l2)
    us, core, bandwidth, busy, moved, roofline = _engine.score(
        int(n), _column(block), _column(bn), _column(tile), _column(cores), k, s, hit
    )
    return BatchResult(us, core, bandwidth, busy, moved, roofline)


def score_groups(
    soc: SocProfile,
    groups: Sequence[tuple[ElementwiseKernel, int, L2State]],
    starts: np.ndarray,
    block: np.ndarray,
    bn: np.ndarray,
    tile: np.ndarray,
    cores: np.ndarray,
) -> np.ndarray:
    """``score``'s predictions of many sizes' configurations in one engine call: group g's (kernel, n, L2 state)
    configurations are rows ``starts[g]`` to ``starts[g + 1]`` of the knob columns (a device fit's cases under
    each profile it tries)."""
    ns = np.array([int(n) for _, n, _ in groups], dtype=np.int64)
    kernels = [kernel_model(kernel) for kernel, _, _ in groups]
    states = [l2_state(l2) for _, _, l2 in groups]
    us: np.ndarray = _engine.score_groups(ns, kernels, states, _column(starts), _column(block), _column(bn),
                                          _column(tile), _column(cores), soc_model(soc))  # fmt: skip
    return us


def bound(
    kernel: ElementwiseKernel,
    soc: SocProfile,
    n: int,
    block: np.ndarray,
    bn: np.ndarray,
    tile: np.ndarray,
    cores: np.ndarray,
    l2: L2State,
) -> tuple[np.ndarray, np.ndarray]:
    """Each configuration's lower bound on its prediction, and where that bound is the prediction to the
    bit (simulate.bounds_us): what a pruned scoring simulates first."""
    k, s, hit = _models(kernel, soc, n, l2)
    lower, certain = _engine.bound(int(n), _column(block), _column(bn), _column(tile), _column(cores), k, s, hit)
    return lower, certain


def refit(
    kernel: ElementwiseKernel,
    soc: SocProfile,
    n: int,
    blocks: tuple[int, ...],
    buffer_num: int,
    tile_top: int,
    seed: tuple[int, int, int] | None = None,
) -> _engine.RefitChoice:
    """The model's fastest (block, tile, cores) with one of ``blocks`` and this buffer count at ``n``
    elements, tiles 512 B, 1 KiB, ... up to ``tile_top`` bytes: what
    ``space.score_space(..., blocks_only=blocks, buffers_only=(buffer_num,)).best_index()`` picks.
    ``seed`` (block, tile, cores) only speeds the search up; block_bytes -1 when no tile fits. Predictions
    in the default (cold) L2 state, with the SoC's knob correction."""
    seed_block, seed_tile, seed_cores = seed if seed is not None else (0, 0, 0)
    return _engine.refit(
        int(n),
        list(blocks),
        buffer_num,
        tile_top,
        soc.aiv_cores,
        kernel_model(kernel),
        soc_model(soc),
        seed_block=seed_block,
        seed_tile=seed_tile,
        seed_cores=seed_cores,
    )


def refit_across(
    kernel: ElementwiseKernel,
    soc: SocProfile,
    n: int,
    blocks: tuple[int, ...],
    slices: list[tuple[int, int]],
    seed: tuple[int, int, int] | None = None,
) -> tuple[int, int, int, int] | None:
    """The model's fastest (block, buffer_num, tile, cores) over ``slices`` of (buffer count, tile top), each
    with every one of ``blocks``: what ``space.score_space(..., blocks_only=blocks)``'s best over those buffer
    counts is (the space's order). The slices are searched in the order given, each bounded by those
    before it: the likeliest first is fastest. None when no tile fits any."""
    seed_block, seed_tile, seed_cores = seed if seed is not None else (0, 0, 0)
    block, bn, tile, cores = _engine.refit_across(
        int(n),
        list(blocks),
        slices,
        soc.aiv_cores,
        kernel_model(kernel),
        soc_model(soc),
        seed_block=seed_block,
        seed_tile=seed_tile,
        seed_cores=seed_cores,
    )
    return (block, bn, tile, cores) if bn > 0 else None


def learned(soc: SocProfile) -> bool:
    """Whether the profile carries a device's knob correction or residual (the engine's ``cost::Learned``): a
    re-fit at an untimed size then searches every buffer count."""
    return soc_model(soc).learned


def core_kinds(
    n: int, elem: int, block_bytes: np.ndarray, buffer_num: np.ndarray, tile_bytes: np.ndarray, core_num: np.ndarray
) -> CoreKinds:
    """The core kinds of M exact-scheme knob sets at n elements (the engine's KindsOf, row by row), as the
    vectorised specification reads them: what tests and benchmarks hand ``simulate``."""
    knobs = zip(block_bytes, tile_bytes, core_num, strict=True)
    rows = [_engine.kinds_of(n, elem, int(b), int(t), int(c)) for b, t, c in knobs]
    return CoreKinds(
        np.array([k.counts for k in rows], dtype=np.int64).reshape(-1, 3),
        np.array([k.elems for k in rows], dtype=np.int64).reshape(-1, 3),
        np.array([k.tiles for k in rows], dtype=np.int64).reshape(-1, 3),
        np.array([k.tail for k in rows], dtype=np.int64).reshape(-1, 3),
        np.array([k.aligned for k in rows], dtype=bool).reshape(-1, 3),
        np.asarray(tile_bytes, dtype=np.int64) // elem,
        np.asarray(buffer_num, dtype=np.int64),
        np.array([k.cores for k in rows], dtype=np.int64),
    )


def best_index(
    predicted_us: np.ndarray,
    block_bytes: np.ndarray,
    buffer_num: np.ndarray,
    tile_bytes: np.ndarray,
    core_num: np.ndarray,
) -> int:
    """The first configuration in the space's order (the engine's ``ConfigBefore``: the rounded prediction,
    then buffers >= 2, fewer buffers, a larger tile, more cores, a larger block); -1 for none."""
    return _engine.best_index(
        np.ascontiguousarray(predicted_us, dtype=np.float64), _column(block_bytes), _column(buffer_num),
        _column(tile_bytes), _column(core_num),
    )  # fmt: skip
