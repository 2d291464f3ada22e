"""Per-core work as the kernel reads it from the tiling struct.

The kernel's Init: a core below tailBlockNum is a big core, the others small, and the last core
(block_dim-1) takes the lastCore* fields. That reading exists once, in C++ (``RunsOf`` in
``include/bce_grad_core_split.h``, through the engine binding), and the cost model's core kinds read it
too; validation and the CLI summary take it from here.
"""

from __future__ import annotations

from dataclasses import dataclass

from tiling_model import _engine
from tiling_model.tiling import TilingData, astuple_fields


@dataclass(slots=True)
class CorePlan:
    """One core's work. Not frozen on purpose: validation builds one per core on every request, and a
    frozen dataclass's __init__ (object.__setattr__ per field) costs several times a plain one; nothing
    mutates these."""

    index: int
    kind: str  # "big", "small" or "last"
    start: int  # first element
    count: int  # elements this core processes
    tiles: int
    tile_elems: int
    tail_elems: int  # elements in the last tile

    @property
    def end(self) -> int:
        """One past the last element."""
        return self.start + self.count


@dataclass(frozen=True, slots=True)
class CoreRun:
    """``cores`` consecutive cores that start ``count`` elements apart and do the same work (one CorePlan
    each): the big cores, the small ones, the last one. What validation walks instead of every core."""

    kind: str
    first: int  # index of the first core
    cores: int
    start: int  # the first core's first element
    count: int
    tiles: int
    tile_elems: int
    tail_elems: int

    @property
    def end(self) -> int:
        """One past the last core's last element."""
        return self.start + self.cores * self.count


_KINDS = ("big", "small", "last")


def core_runs(t: TilingData) -> list[CoreRun]:
    """The struct as the kernel reads it: at most three runs (big, small, last), in core order, runs with
    no core left out."""
    if t.block_dim <= 0:
        return []
    runs = _engine.core_runs(astuple_fields(t.fields), t.block_dim)
    te = t.fields.tileDataNum
    return [
        CoreRun(kind, first, cores, start, count, tiles, te, tail)
        for kind, (first, cores, start, count, tiles, tail) in zip(_KINDS, runs, strict=True)
        if cores > 0
    ]


def core_plan(t: TilingData) -> list[CorePlan]:
    """``core_runs(t)`` core by core."""
    return [
        CorePlan(r.first + j, r.kind, r.start + j * r.count, r.count, r.tiles, r.tile_elems, r.tail_elems)
        for r in core_runs(t)
        for j in range(r.cores)
    ]
