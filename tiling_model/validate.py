"""Check a tiling against the hardware rules and the kernel's buffer plan.

Each violation names its kind so callers (tuner, service, tests) can act on it:
``ub_overflow``, ``misaligned_copy``, ``coverage``, ``out_of_bounds``, ``core_count``,
``queue_limit``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from tiling_model.kernels import MAX_BUFFERS_PER_POSITION
from tiling_model.plan import core_plan
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
    """All rule violations of ``t`` (empty list: the tiling is safe to launch)."""
    profile = soc or load_soc(t.soc)
    layout = t.kernel
    p = t.params
    out: list[Violation] = []

    if p.core_num > profile.aiv_cores or t.block_dim > profile.aiv_cores:
        out.append(
            Violation(
                "core_count",
                f"{max(p.core_num, t.block_dim)} cores requested, {profile.name} has {profile.aiv_cores} vector cores",
                max(p.core_num, t.block_dim),
            )
        )
    for pos, queues in (("VECIN", layout.vecin_queues), ("VECOUT", layout.vecout_queues)):
        buffers = queues * p.buffer_num
        if buffers > MAX_BUFFERS_PER_POSITION:
            out.append(
                Violation(
                    "queue_limit",
                    f"{queues} {pos} queues x buffer_num {p.buffer_num} = {buffers} buffers; "
                    f"AscendC allows {MAX_BUFFERS_PER_POSITION} per position",
                    buffers,
                )
            )
    ub = layout.ub_bytes(p.tile_bytes, p.buffer_num)
    if ub > profile.ub_usable_bytes:
        out.append(
            Violation(
                "ub_overflow",
                f"buffers need {ub} B of UB; {profile.name} allows {profile.ub_usable_bytes} B "
                f"({profile.ub_bytes} less {profile.ub_reserve_bytes} reserved)",
                ub - profile.ub_usable_bytes,
            )
        )
    if t.n == 0:
        return out

    elem = t.elem_bytes
    plans = core_plan(t)
    tile_bytes = t.fields.tileDataNum * elem
    # Exact scheme: the tail goes through DataCopyPad when it is not a 32-B multiple.
    pad_tail = t.scheme == "exact"
    if tile_bytes % DATACOPY_UNIT and any(c.tiles > 1 for c in plans):
        out.append(
            Violation(
                "misaligned_copy",
                f"full tiles are DataCopy of {tile_bytes} B, not a multiple of {DATACOPY_UNIT} B: "
                f"the last {tile_bytes % DATACOPY_UNIT} B of each are dropped",
                tile_bytes,
            )
        )
    if not pad_tail:
        bad = sorted({c.tail_elems * elem for c in plans if c.tiles and (c.tail_elems * elem) % DATACOPY_UNIT})
        if bad:
            out.append(
                Violation(
                    "misaligned_copy",
                    f"tail DataCopy of {', '.join(map(str, bad))} B is not a multiple of {DATACOPY_UNIT} B",
                    bad[0],
                )
            )

    # Coverage: each core's tiles must add up to its count, and cores must tile [0, n).
    dropped = 0
    for c in plans:
        if c.tiles == 0 and c.count == 0:
            continue
        if (
            c.tiles < 1
            or not 1 <= c.tail_elems <= c.tile_elems
            or (c.tiles - 1) * c.tile_elems + c.tail_elems != c.count
        ):
            covered = max(c.tiles - 1, 0) * c.tile_elems + c.tail_elems
            out.append(
                Violation(
                    "coverage",
                    f"core {c.index} ({c.kind}): {c.tiles} tiles of {c.tile_elems} with a tail of {c.tail_elems} "
                    f"cover {covered} elements, but the core owns {c.count}",
                    abs(covered - c.count),
                )
            )
        full = _copied_elems(c.tile_elems, elem, False)
        tail = _copied_elems(c.tail_elems, elem, pad_tail)
        dropped += max(c.tiles - 1, 0) * (c.tile_elems - full) + (c.tail_elems - tail)
    if dropped:
        out.append(Violation("coverage", f"{dropped} elements never written (DataCopy rounds down to 32 B)", dropped))
    expected = 0
    for c in sorted(plans, key=lambda c: c.start):
        if c.count <= 0:
            continue
        if c.start > expected and expected < t.n:
            missed = min(c.start, t.n) - expected
            out.append(
                Violation("coverage", f"elements {expected}..{min(c.start, t.n) - 1} assigned to no core", missed)
            )
        elif c.start < expected:
            out.append(
                Violation(
                    "coverage",
                    f"core {c.index} starts at {c.start}, inside the previous core's range (..{expected - 1})",
                    expected - c.start,
                )
            )
        expected = max(expected, c.end)
    if expected < t.n:
        out.append(Violation("coverage", f"elements {expected}..{t.n - 1} assigned to no core", t.n - expected))

    over = expected - t.n
    if over > 0:
        streams = ", ".join(layout.full_inputs)
        out.append(
            Violation(
                "out_of_bounds",
                f"{over} elements ({over * elem} B) past the end of each tensor: read from {streams}, written to z",
                over,
            )
        )
    if layout.scalar_queue_bytes and t.variant.reduction != "none":
        extra = layout.scalar_queue_bytes // elem - 1
        out.append(
            Violation(
                "out_of_bounds",
                f"scalar grad read as {extra + 1} elements per tile: {extra} elements ({extra * elem} B) past its end",
                extra,
            )
        )
    return out
