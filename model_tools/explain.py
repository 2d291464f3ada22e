"""A tiling as the explorer shows it, as data: where the elements fall over cores and tiles (and past
the tensors), how the UB is filled, how the pipeline of one core of each kind runs, and how the
predicted time moves with tile size and core count.

Everything here is read from the model itself (the per-core plan, the kernel's buffer plan, the
simulator's stage costs and schedule, the space's scoring), so a picture cannot disagree with the
prediction. ``model_tools.explorer_plot`` draws it; ``POST /tiling/explain`` serves it as JSON.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from tiling_model import engine
from tiling_model.confidence import interval
from tiling_model.cost import engine_kinds, predict_detail
from tiling_model.kernels import bce_grad_kernel
from tiling_model.model_types import DEFAULT_L2, KINDS
from tiling_model.plan import core_plan
from tiling_model.soc import SocProfile, load_soc
from tiling_model.space import score_space, tile_choices
from tiling_model.tiling import TilingData, TilingParams, compute_tiling

STAGES = ("MTE2", "V", "MTE3")  # CopyIn, Compute, CopyOut
MAX_TILES_SHOWN = 24  # tiles of one core drawn in the timeline (the simulator extrapolates the rest)


@dataclass(frozen=True)
class CoreSpan:
    core: int
    kind: str  # big, small or last
    start: int  # first element
    count: int  # elements it processes
    tiles: int
    tile_elems: int
    tail_elems: int
    past_end: int  # of those, elements beyond the tensors' end (the requirement's rounding to blocks)


@dataclass(frozen=True)
class UbBuffer:
    name: str
    role: str  # VECIN / VECOUT queue, TBuf temporary, scalar queue, staging
    count: int  # buffers of this size (BUFFER_NUM for a queue)
    bytes_each: int

    @property
    def total(self) -> int:
        return self.count * self.bytes_each


@dataclass(frozen=True)
class UbPlan:
    buffers: tuple[UbBuffer, ...]
    ub_bytes: int  # the SoC's UB
    reserve_bytes: int  # what the kernel must leave free
    used_bytes: int

    @property
    def usable_bytes(self) -> int:
        return self.ub_bytes - self.reserve_bytes


@dataclass(frozen=True)
class StageSpan:
    tile: int
    stage: str  # MTE2, V or MTE3
    start_us: float  # from the core's start (after its start-up and row copy)
    end_us: float


@dataclass(frozen=True)
class KindTimeline:
    kind: str
    cores: int  # cores of this kind
    tiles: int  # tiles each of them runs
    start_us: float  # core start-up and the pos_weight row copy before the first tile
    spans: tuple[StageSpan, ...]  # the first MAX_TILES_SHOWN tiles
    end_us: float  # the simulated end of this kind's last CopyOut (all tiles), start included
    busy_us: dict[str, float]  # per stage, all tiles


@dataclass(frozen=True)
class Landscape:
    """Predicted time over tile size x core count for the tiling's block size and BUFFER_NUM."""

    block_bytes: int
    buffer_num: int
    tile_bytes: tuple[int, ...]
    core_nums: tuple[int, ...]
    predicted_us: tuple[tuple[float, ...], ...]  # [core index][tile index]
    marks: dict[str, tuple[int, int]]  # name -> (tile_bytes, core_num): this tiling, seed default, model best
    roofline_us: float


@dataclass(frozen=True)
class Explanation:
    soc: str
    n: int
    scheme: str
    params: dict[str, int]
    predicted_us: float
    predicted_interval_us: tuple[float, float]  # tiling_model.confidence: where the time is expected
    predicted_interval_basis: str
    roofline_us: float
    seed_default_us: float  # the exact kernel with the default knobs at this shape
    bottleneck: str
    core_map: tuple[CoreSpan, ...]
    ub: UbPlan
    timelines: tuple[KindTimeline, ...]
    landscape: Landscape | None
    notes: tuple[str, ...] = field(default=())

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ub"]["usable_bytes"] = self.ub.usable_bytes
        for b, src in zip(d["ub"]["buffers"], self.ub.buffers, strict=True):
            b["total"] = src.total
        return d


def ub_plan(t: TilingData, soc: SocProfile) -> UbPlan:
    """Every UB buffer the kernel allocates for this tiling (``ElementwiseKernel.ub_buffers``)."""
    tile = t.fields.tileDataNum * t.elem_bytes
    buffers = tuple(UbBuffer(*b) for b in t.kernel.ub_buffers(tile, t.params.buffer_num))
    return UbPlan(buffers, soc.ub_bytes, soc.ub_reserve_bytes, sum(b.total for b in buffers))


def schedule(ntiles: int, full: tuple[float, float, float], tail: tuple[float, float, float], bn: int,
             shown: int) -> list[StageSpan]:  # fmt: skip
    """The first ``shown`` tiles of one core as the simulator schedules them (simulate.py's pipeline
    recurrence, drawn tile by tile): a tile's CopyIn waits for the previous CopyIn and for the Compute
    of the tile BUFFER_NUM before (its buffer); its Compute for its CopyIn, the previous Compute and the
    CopyOut BUFFER_NUM before; its CopyOut for its Compute and the previous CopyOut."""
    spans: list[StageSpan] = []
    comp_hist, out_hist = [0.0], [0.0]
    in_end = comp_end = out_end = 0.0
    for i in range(min(ntiles, shown)):
        a, b, c = tail if i == ntiles - 1 else full
        back = max(i - bn, -1) + 1
        in_start = max(in_end, comp_hist[back])
        in_end = in_start + a
        v_start = max(max(in_end, comp_end), out_hist[back])
        comp_end = v_start + b
        out_start = max(comp_end, out_end)
        out_end = out_start + c
        comp_hist.append(comp_end)
        out_hist.append(out_end)
        spans += [
            StageSpan(i, "MTE2", in_start, in_end),
            StageSpan(i, "V", v_start, comp_end),
            StageSpan(i, "MTE3", out_start, out_end),
        ]
    return spans


def _timelines(t: TilingData, soc: SocProfile) -> tuple[KindTimeline, ...]:
    k = engine_kinds(t)
    bn = t.params.buffer_num
    kinds, row_us = engine.pipelines(t.kernel, soc, k, t.fields.tileDataNum, bn, t.n, DEFAULT_L2)
    start = soc.core_start_us + row_us
    out = []
    for j, kind in enumerate(KINDS):
        cores, ntiles = k.counts[j], k.tiles[j]
        if cores <= 0 or ntiles <= 0:
            continue
        full, tail, pipeline_end = kinds[j]
        nfull = ntiles - 1
        busy = {s: nfull * f + x for s, f, x in zip(STAGES, full, tail, strict=True)}
        out.append(KindTimeline(kind, cores, ntiles, start, tuple(schedule(ntiles, full, tail, bn, MAX_TILES_SHOWN)),
                                start + pipeline_end, busy))  # fmt: skip
    return tuple(out)


def _landscape(t: TilingData, soc: SocProfile) -> Landscape | None:
    """The exact scheme's slice at this tiling's block and BUFFER_NUM (None if that BUFFER_NUM is not
    allowed for the exact kernel or the shape is empty)."""
    v, n, p = t.variant, t.n, t.params
    kernel = bce_grad_kernel(v, "exact", max(t.fields.posWeightClasses, 1), max(t.fields.weightPeriod, 1))
    if n == 0 or p.buffer_num not in kernel.allowed_buffer_nums() or tile_choices(kernel, soc, p.buffer_num).size == 0:
        return None
    scored = score_space(kernel, soc, n, blocks_only=(p.block_bytes,), buffers_only=(p.buffer_num,))
    tiles = tuple(int(x) for x in np.unique(scored.tile_bytes))
    cores = tuple(int(x) for x in np.unique(scored.core_num))
    grid = np.full((len(cores), len(tiles)), np.nan)
    ti = np.searchsorted(tiles, scored.tile_bytes)
    ci = np.searchsorted(cores, scored.core_num)
    grid[ci, ti] = scored.result.predicted_us
    best = scored.best_index()
    marks = {"model best": (int(scored.tile_bytes[best]), int(scored.core_num[best]))}
    if t.scheme == "exact":
        marks["this tiling"] = (p.tile_bytes, min(p.core_num, cores[-1]))
    default = compute_tiling([n], v, TilingParams(), soc, "exact", t.fields.weightPeriod or None).params
    if (default.block_bytes, default.buffer_num) == (p.block_bytes, p.buffer_num):  # on this slice
        marks["seed default"] = (default.tile_bytes, min(default.core_num, cores[-1]))
    return Landscape(
        p.block_bytes,
        p.buffer_num,
        tiles,
        cores,
        tuple(tuple(round(float(x), 4) for x in row) for row in grid),
        marks,
        round(float(np.nanmin(scored.result.roofline_us)), 4),
    )


def explain(t: TilingData, soc: SocProfile | str | None = None, landscape: bool = True) -> Explanation:
    """The explorer's data for one tiling (in the default cold L2, as the tables are tuned)."""
    soc = load_soc(soc or t.soc) if not isinstance(soc, SocProfile) else soc
    pred = predict_detail(t, soc)
    band = interval(t, soc, pred.predicted_us)
    plans = core_plan(t)
    core_map = tuple(
        CoreSpan(
            c.index,
            c.kind,
            c.start,
            c.count,
            c.tiles,
            c.tile_elems,
            c.tail_elems,
            c.end - max(min(c.end, t.n), c.start),
        )
        for c in plans
    )
    period = t.fields.weightPeriod or None
    default = compute_tiling([t.n], t.variant, TilingParams(), soc, "exact", period) if t.n else None
    notes = []
    past = sum(c.past_end for c in core_map)
    if past:
        notes.append(f"{past} elements past the end of every tensor are read and written (red in the core map)")
    return Explanation(
        soc.name,
        t.n,
        t.scheme,
        dict(t.params.as_dict()),
        round(pred.predicted_us, 4),
        (band.lo_us, band.hi_us),
        band.basis,
        round(pred.roofline_us, 4),
        round(predict_detail(default, soc).predicted_us, 4) if default else 0.0,
        pred.bottleneck,
        core_map,
        ub_plan(t, soc),
        _timelines(t, soc) if t.block_dim else (),
        _landscape(t, soc) if landscape else None,
        tuple(notes),
    )
