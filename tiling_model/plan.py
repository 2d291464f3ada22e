"""Per-core work as the kernel reads it from the tiling struct.

This mirrors the kernel's Init: a core below tailBlockNum is a big core, the others small,
and the last core (block_dim-1) takes the lastCore* fields. Validation, the cost model and
the CLI summary all read the plan from here, so they cannot disagree with each other.
"""

from __future__ import annotations

from dataclasses import dataclass

from tiling_model.tiling import TilingData


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


def core_plan(t: TilingData) -> list[CorePlan]:
    f = t.fields
    plans = []
    for i in range(t.block_dim):
        if i < f.tailBlockNum:
            kind, start = "big", f.bigCoreDataNum * i
            count, tiles, tail = f.bigCoreDataNum, f.finalBigTileNum, f.bigTailDataNum
        else:
            kind = "small"
            start = f.bigCoreDataNum * f.tailBlockNum + f.smallCoreDataNum * (i - f.tailBlockNum)
            count, tiles, tail = f.smallCoreDataNum, f.finalSmallTileNum, f.smallTailDataNum
        if i == t.block_dim - 1:
            kind, count, tiles, tail = "last", f.lastCoreDataNum, f.lastCoreTileNum, f.lastCoreTailDataNum
        plans.append(CorePlan(i, kind, start, count, tiles, f.tileDataNum, tail))
    return plans


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


def core_runs(t: TilingData) -> list[CoreRun]:
    """``core_plan(t)`` as at most three runs, in core order (runs with no core left out)."""
    f, last = t.fields, t.block_dim - 1
    if t.block_dim <= 0:
        return []
    big = min(f.tailBlockNum, last)
    small = max(last - f.tailBlockNum, 0)
    small_start = f.bigCoreDataNum * f.tailBlockNum
    if last < f.tailBlockNum:
        last_start = f.bigCoreDataNum * last
    else:
        last_start = small_start + f.smallCoreDataNum * (last - f.tailBlockNum)
    te = f.tileDataNum
    runs = [
        CoreRun("big", 0, big, 0, f.bigCoreDataNum, f.finalBigTileNum, te, f.bigTailDataNum),
        CoreRun("small", f.tailBlockNum, small, small_start, f.smallCoreDataNum, f.finalSmallTileNum, te,
                f.smallTailDataNum),
        CoreRun("last", last, 1, last_start, f.lastCoreDataNum, f.lastCoreTileNum, te, f.lastCoreTailDataNum),
    ]  # fmt: skip
    return [r for r in runs if r.cores > 0]
