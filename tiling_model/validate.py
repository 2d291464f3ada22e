"""Check a tiling against the hardware rules and the kernel's buffer plan.

Each violation names its kind so callers (tuner, service, tests) can act on it:
``ub_overflow``, ``misaligned_copy``, ``coverage``, ``out_of_bounds`` (past the end of the
tensors), ``scalar_out_of_bounds`` (past a scalar input: the seed's 16-element grad), ``core_count``,
``queue_limit``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass

from tiling_model import _engine
from tiling_model.kernels import MAX_BUFFERS_PER_POSITION
from tiling_model.plan import CorePlan, core_plan, core_runs
from tiling_model.soc import SocProfile, load_soc
from tiling_model.tiling import TilingData

#: DataCopy moves whole 32-B blocks; a shorter remainder is silently dropped.
DATACOPY_UNIT = 32


@dataclass(frozen=True)
class Violation:
    kind: str
    message: str
    count: int | None = None  # elements or bytes involved, where one number says it

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def _copied_elems(elems: int, elem_bytes: int, padded: bool) -> int:
    """Elements a copy of ``elems`` really moves: DataCopyPad moves all, DataCopy whole 32 B."""
    if padded:
        return elems
    return elems * elem_bytes // DATACOPY_UNIT * DATACOPY_UNIT // elem_bytes


def validate(t: TilingData, soc: SocProfile | None = None) -> list[Violation]:
    """All rule violations of ``t`` (empty list: the tiling is safe to launch), in a fixed order:
    the core, queue and UB limits, then (for a non-empty tensor) copy sizes, coverage and bounds."""
    profile = soc or load_soc(t.soc)
    out = [*_core_count(t, profile), *_queue_limit(t), *_ub_overflow(t, profile)]
    if t.n == 0 or _runs_are_clean(t):
        return out
    return out + core_by_core(t)


def core_by_core(t: TilingData) -> list[Violation]:
    """The copy-size, coverage and bounds violations, found by walking every core's plan."""
    plans = core_plan(t)
    covered_to = _last_element_covered(t, plans)
    return [*_copy_sizes(t, plans), *_coverage(t, plans, covered_to), *_out_of_bounds(t, covered_to)]


def _runs_are_clean(t: TilingData) -> bool:
    """True only where the copy-size, coverage and bounds checks would find nothing: the same checks on the
    core runs (each core of a run does the same work, a run's cores tile its range back to back), so a
    request costs three checks instead of one per core. Anything else (a violation, an odd layout) takes
    the core-by-core walk, which names every core involved."""
    if t.kernel.scalar_queue_bytes and t.variant.reduction != "none":
        return False
    elem, expected = t.elem_bytes, 0
    tile_bytes = t.fields.tileDataNum * elem
    for r in core_runs(t):
        if r.count <= 0:
            return False
        if r.tiles < 1 or not 1 <= r.tail_elems <= r.tile_elems:
            return False
        if (r.tiles - 1) * r.tile_elems + r.tail_elems != r.count:
            return False
        if r.tiles > 1 and tile_bytes % DATACOPY_UNIT:
            return False
        if t.scheme != "exact" and (r.tail_elems * elem) % DATACOPY_UNIT:
            return False
        if _copied_elems(r.tail_elems, elem, t.scheme == "exact") != r.tail_elems:
            return False
        if r.tiles > 1 and _copied_elems(r.tile_elems, elem, False) != r.tile_elems:
            return False
        expected = r.end  # the runs start back to back (core_runs): they tile [0, n) if the last ends at n
    return expected == t.n


def _core_count(t: TilingData, soc: SocProfile) -> Iterator[Violation]:
    cores = max(t.params.core_num, t.block_dim)
    if cores > soc.aiv_cores:
        yield Violation("core_count", f"{cores} cores requested, {soc.name} has {soc.aiv_cores} vector cores", cores)


def _queue_limit(t: TilingData) -> Iterator[Violation]:
    bn = t.params.buffer_num
    for pos, queues in (("VECIN", t.kernel.vecin_queues), ("VECOUT", t.kernel.vecout_queues)):
        buffers = queues * bn
        if not _engine.queue_limit_allows(queues, 0, bn):  # per position: the engine's one queue limit
            yield Violation(
                "queue_limit",
                f"{queues} {pos} queues x buffer_num {bn} = {buffers} buffers; "
                f"AscendC allows {MAX_BUFFERS_PER_POSITION} per position",
                buffers,
            )


def _ub_overflow(t: TilingData, soc: SocProfile) -> Iterator[Violation]:
    ub = t.kernel.ub_bytes(t.params.tile_bytes, t.params.buffer_num)
    if ub > soc.ub_usable_bytes:
        yield Violation(
            "ub_overflow",
            f"buffers need {ub} B of UB; {soc.name} allows {soc.ub_usable_bytes} B "
            f"({soc.ub_bytes} less {soc.ub_reserve_bytes} reserved)",
            ub - soc.ub_usable_bytes,
        )


def _copy_sizes(t: TilingData, plans: list[CorePlan]) -> Iterator[Violation]:
    """DataCopy moves whole 32-B blocks: full tiles must be 32-B multiples, and so must the seed's
    tails (the exact scheme copies tails with DataCopyPad)."""
    elem = t.elem_bytes
    tile_bytes = t.fields.tileDataNum * elem
    if tile_bytes % DATACOPY_UNIT and any(c.tiles > 1 for c in plans):
        yield Violation(
            "misaligned_copy",
            f"full tiles are DataCopy of {tile_bytes} B, not a multiple of {DATACOPY_UNIT} B: "
            f"the last {tile_bytes % DATACOPY_UNIT} B of each are dropped",
            tile_bytes,
        )
    if t.scheme != "exact":
        bad = sorted({c.tail_elems * elem for c in plans if c.tiles and (c.tail_elems * elem) % DATACOPY_UNIT})
        if bad:
            yield Violation(
                "misaligned_copy",
                f"tail DataCopy of {', '.join(map(str, bad))} B is not a multiple of {DATACOPY_UNIT} B",
                bad[0],
            )


def _coverage(t: TilingData, plans: list[CorePlan], covered_to: int) -> Iterator[Violation]:
    """Each core's tiles add up to its count, every copied element is written, and the cores tile [0, n)."""
    elem, pad_tail, dropped = t.elem_bytes, t.scheme == "exact", 0
    for c in plans:
        if c.tiles == 0 and c.count == 0:
            continue
        covered = max(c.tiles - 1, 0) * c.tile_elems + c.tail_elems
        if c.tiles < 1 or not 1 <= c.tail_elems <= c.tile_elems or covered != c.count:
            yield Violation(
                "coverage",
                f"core {c.index} ({c.kind}): {c.tiles} tiles of {c.tile_elems} with a tail of {c.tail_elems} "
                f"cover {covered} elements, but the core owns {c.count}",
                abs(covered - c.count),
            )
        full = _copied_elems(c.tile_elems, elem, False)
        tail = _copied_elems(c.tail_elems, elem, pad_tail)
        dropped += max(c.tiles - 1, 0) * (c.tile_elems - full) + (c.tail_elems - tail)
    if dropped:
        yield Violation("coverage", f"{dropped} elements never written (DataCopy rounds down to 32 B)", dropped)
    expected = 0
    for c in sorted(plans, key=lambda c: c.start):
        if c.count <= 0:
            continue
        if c.start > expected and expected < t.n:
            missed = min(c.start, t.n) - expected
            yield Violation("coverage", f"elements {expected}..{min(c.start, t.n) - 1} assigned to no core", missed)
        elif c.start < expected:
            yield Violation(
                "coverage",
                f"core {c.index} starts at {c.start}, inside the previous core's range (..{expected - 1})",
                expected - c.start,
            )
        expected = max(expected, c.end)
    if covered_to < t.n:
        yield Violation("coverage", f"elements {covered_to}..{t.n - 1} assigned to no core", t.n - covered_to)


def _last_element_covered(t: TilingData, plans: list[CorePlan]) -> int:
    """One past the last element any core touches (the cores walked in order, as coverage does)."""
    expected = 0
    for c in sorted(plans, key=lambda c: c.start):
        if c.count > 0:
            expected = max(expected, c.end)
    return expected


def _out_of_bounds(t: TilingData, covered_to: int) -> Iterator[Violation]:
    """Reads and writes past the tensors: the seed's rounding to whole blocks, its 16-element grad."""
    elem, layout = t.elem_bytes, t.kernel
    over = covered_to - t.n
    if over > 0:
        streams = ", ".join(layout.full_inputs)
        yield Violation(
            "out_of_bounds",
            f"{over} elements ({over * elem} B) past the end of each tensor: read from {streams}, written to z",
            over,
        )
    if layout.scalar_queue_bytes and t.variant.reduction != "none":
        extra = layout.scalar_queue_bytes // elem - 1
        yield Violation(
            "scalar_out_of_bounds",
            f"scalar grad read as {extra + 1} elements per tile: {extra} elements ({extra * elem} B) past its end",
            extra,
        )
