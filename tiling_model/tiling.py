"""Host tiling: split n elements over vector cores in blocks, then each core into UB tiles.

Two schemes share the seed's big-core / small-core structure:

* ``seed`` reproduces the requirement's host tiling field by field (UB size as the
  platform reports it, nothing reserved, tiles in whole 512-B blocks, uint32 intermediates),
  flaws included: every core is rounded up to whole blocks, so the last core reads and writes
  past the end of the tensors whenever n*dtype_size is not a multiple of the block.
* ``exact`` (default) gives every element to exactly one core and one tile: the last core is
  cut to end at element n-1 and its tail is exact (the kernel copies non-32-B tails with
  DataCopyPad).
"""

from __future__ import annotations

import math
import operator
import struct
from collections.abc import Sequence
from dataclasses import dataclass, fields

from tiling_model import _engine
from tiling_model.dtypes import DTYPE_BYTES, REDUCTION_ID, Dtype
from tiling_model.errors import BadRequest
from tiling_model.kernels import SCHEMES, ElementwiseKernel, Scheme, bce_grad_kernel
from tiling_model.soc import SocProfile, load_soc
from tiling_model.variant import PERIODIC_FORMS, Variant

INT64_MAX = 2**63 - 1
#: The seed's block granularity and its UB share count (ubDataNumber: 5 tensors).
SEED_BLOCK_BYTES: int = _engine.SEED_BLOCK_BYTES  # the default block of both schemes (the host's)


class TilingError(BadRequest):
    """Input that cannot be turned into a tiling at all (bad shape or parameter domain)."""


#: The four knobs, in the order every table, record and API lists them.
KNOB_NAMES = ("block_bytes", "buffer_num", "tile_bytes", "core_num")


@dataclass(frozen=True)
class TilingParams:
    """The four knobs the tuner searches; ``None`` means the scheme's default."""

    block_bytes: int | None = None
    buffer_num: int | None = None
    tile_bytes: int | None = None
    core_num: int | None = None

    def as_dict(self) -> dict[str, int | None]:
        return {f.name: getattr(self, f.name) for f in fields(self)}  # flat ints: no asdict deep copy


@dataclass(frozen=True)
class ResolvedParams:
    block_bytes: int
    buffer_num: int
    tile_bytes: int
    core_num: int

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class TilingFields:
    """The kernel's tiling struct, field for field and in order (all int64).

    Mirrors ``kernel/op_kernel/bce_grad_tiling_data.h``; a test checks the two agree.
    The first ten fields are the requirement's, the last seven are bcetune's additions.
    """

    totalLength: int
    smallCoreDataNum: int
    bigCoreDataNum: int
    finalBigTileNum: int
    finalSmallTileNum: int
    tileDataNum: int
    smallTailDataNum: int
    bigTailDataNum: int
    tailBlockNum: int
    reduction: int
    lastCoreDataNum: int  # elements of core block_dim-1 (exact: cut at n-1)
    lastCoreTileNum: int
    lastCoreTailDataNum: int
    scaleBits: int  # IEEE-754 float32 bits of the grad scale: 1/N for mean, 1.0 otherwise
    posWeightClasses: int  # C of a last-dim pos_weight ([C]), else 0
    tilingKey: int = 0  # the variant key the kernel dispatches on (see ``tiling_key``)
    weightPeriod: int = 0  # a broadcast weight's P (last_dim: its row repeats every P) or R (rows), else 0

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return _FIELD_NAMES


@dataclass(frozen=True)
class TilingData:
    """An immutable tiling: the struct fields plus what the launcher needs."""

    fields: TilingFields
    block_dim: int
    tiling_key: int
    scheme: Scheme
    soc: str
    shape: tuple[int, ...]
    variant: Variant  # of a generic elementwise kernel: its dtype, reduction none, no weight
    params: ResolvedParams
    kernel: ElementwiseKernel

    @property
    def n(self) -> int:
        return self.fields.totalLength

    @property
    def elem_bytes(self) -> int:
        return DTYPE_BYTES[self.variant.dtype]

    @property
    def workspace_bytes(self) -> int:
        """GM workspace the kernel needs: per core, the periodic row of each last-dim operand
        (pos_weight's first, then the weight's), none for an empty tensor (the host's WorkspaceBytes)."""
        v = self.variant
        return _engine.workspace_bytes(
            astuple_fields(self.fields),
            self.block_dim,
            self.elem_bytes,
            v.pos_weight == "last_dim",
            v.weight == "last_dim",
        )

    @property
    def device_bytes(self) -> int:
        """Device memory the launch needs: its tensors (every full input and output, a last-dim
        operand's row of C or P values, a rows operand's n / R values, the scalars) and its workspace."""
        k, f, elem = self.kernel, self.fields, self.elem_bytes
        rows = 0
        if self.variant.pos_weight == "last_dim":
            rows += f.posWeightClasses
        if self.variant.weight == "last_dim":
            rows += f.weightPeriod
        tensors: int = math.ceil(k.hbm_bytes(self.n)) + (rows + len(k.scalar_inputs)) * elem
        return tensors + self.workspace_bytes

    def field_dict(self) -> dict[str, int]:
        return {name: getattr(self.fields, name) for name in _FIELD_NAMES}  # in struct order

    def to_bytes(self) -> bytes:
        """The exact bytes the kernel reads: little-endian int64 fields in struct order."""
        values = astuple_fields(self.fields)
        return struct.pack(f"<{len(values)}q", *values)


_FIELD_NAMES = tuple(f.name for f in fields(TilingFields))


_FIELD_VALUES = operator.attrgetter(*_FIELD_NAMES)


def astuple_fields(f: TilingFields) -> tuple[int, ...]:
    """The struct's values in order (what the engine binding takes; a request asks it several times)."""
    values: tuple[int, ...] = _FIELD_VALUES(f)
    return values


def tiling_key(variant: Variant, buffer_num: int) -> int:
    """Decimal-digit key the kernel dispatches on (it travels in the struct; CANN's own tiling key is 0): the
    host's ``TilingKey``. ones: schMode (0 none, 1 sum/mean, as the seed); tens: dtype id; hundreds: weight
    form (0 none, 1 full, 2 last_dim, 3 rows, 4 scalar); thousands: BUFFER_NUM (a template parameter of the
    kernel class); ten-thousands: pos_weight (the same digits); hundred-thousands: wrt (0 logit, 1 probability).
    """
    return _engine.tiling_key(*variant.ids, buffer_num)


def element_count(shape: Sequence[int]) -> int:
    """Product of the dims, checked: non-negative ints, result within int64."""
    n = 1
    for i, d in enumerate(shape):
        if isinstance(d, bool) or not isinstance(d, int):
            raise TilingError(f"shape[{i}] must be an integer, got {d!r}", "shape")
        if d < 0:
            raise TilingError(f"shape[{i}] is negative ({d})", "shape")
        n *= d
    if n > INT64_MAX:
        raise TilingError(f"element count {n} exceeds int64", "shape")
    return n


def default_tile_bytes(kernel: ElementwiseKernel, soc: SocProfile, block_bytes: int, buffer_num: int) -> int:
    """Exact scheme default: the seed's whole-block rule applied to the usable UB and the
    variant's real buffer plan (largest multiple of the block that fits; 32 B if none does)."""
    return _resolve(kernel, soc, "exact", block_bytes, buffer_num, 0, 1)[2]


def _resolve(
    kernel: ElementwiseKernel, soc: SocProfile, scheme: Scheme, block: int, bn: int, tile: int, cores: int
) -> tuple[int, int, int, int]:
    """The host tiling's ``ResolveKnobs``: its defaults where a knob is 0 (block 512, double buffering as the
    queue limit allows, the tile from the UB plan or the seed's formula, every vector core)."""
    try:
        return _engine.resolve_knobs(
            kernel.buffer_plan(), soc.ub_bytes, soc.ub_reserve_bytes, soc.aiv_cores, scheme, block, bn, tile, cores
        )
    except ValueError as e:
        raise TilingError(str(e)) from None


def resolve_params(
    params: TilingParams | None,
    kernel: ElementwiseKernel,
    soc: SocProfile,
    scheme: Scheme,
) -> ResolvedParams:
    """Fill defaults and check each knob's domain (values a tiling cannot even express).

    Alignment, UB fit, queue and core limits are not checked here: ``validate`` reports them,
    so a user can look at a tiling that breaks them.
    """
    p = params or TilingParams()
    for name in KNOB_NAMES:
        v = getattr(p, name)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise TilingError(f"{name} must be a positive integer, got {v!r}", name)
    block = p.block_bytes if p.block_bytes is not None else SEED_BLOCK_BYTES
    if block % 32:
        raise TilingError(f"block_bytes={block} is not a multiple of 32 (the UB block and GM copy unit)", "block_bytes")
    if p.tile_bytes is not None:  # named with its value here; the defaults the host computes always pass
        _check_tile(p.tile_bytes, kernel.dtype, block, scheme)
    return ResolvedParams(*_resolve(kernel, soc, scheme, block, p.buffer_num or 0, p.tile_bytes or 0, p.core_num or 0))


def _check_tile(tile: int, dtype: Dtype, block: int, scheme: Scheme) -> None:
    elem = DTYPE_BYTES[dtype]
    if tile % elem:
        raise TilingError(f"tile_bytes={tile} is not a multiple of the {dtype} size ({elem} B)", "tile_bytes")
    if scheme == "seed" and tile % block:
        raise TilingError(
            f"the seed scheme tiles in whole blocks: tile_bytes={tile} is not a multiple of block_bytes={block}"
        )


def compute_tiling(
    shape: Sequence[int],
    variant: Variant,
    params: TilingParams | None = None,
    soc: str | SocProfile = "Ascend910B2",
    scheme: Scheme = "exact",
    weight_period: int | None = None,
) -> TilingData:
    """Compute the host tiling of one BinaryCrossEntropyGrad call.

    Raises TilingError / UnsupportedError (both BadRequest) on input no tiling can express. A
    last-dim pos_weight has shape [C] with C the last dim of ``shape``; a last-dim or rows weight has
    period ``weight_period`` (default: the last dim, as for a [C] or [..., 1] weight).
    """
    if scheme not in SCHEMES:
        raise TilingError(f"unknown scheme {scheme!r}; known: {', '.join(SCHEMES)}")
    n = element_count(shape)
    classes = shape[-1] if variant.pos_weight == "last_dim" and len(shape) else 0
    if variant.pos_weight == "last_dim" and classes < 1 and n:
        raise TilingError("pos_weight='last_dim' needs a last dim >= 1")
    period = weight_period_of(variant, shape, weight_period)
    try:
        kernel = bce_grad_kernel(variant, scheme, max(classes, 1), max(period, 1))  # period >= 1 unless empty
    except BadRequest as e:
        raise TilingError(str(e)) from None
    return tile_kernel(kernel, shape, params, soc, scheme, variant, classes, period)


def weight_period_of(variant: Variant, shape: Sequence[int], weight_period: int | None) -> int:
    """The weight's period for the struct: P of last_dim, R of rows (given, else the last dim), else 0."""
    if variant.weight not in PERIODIC_FORMS:
        return 0
    period = weight_period if weight_period is not None else (int(shape[-1]) if len(shape) else 1)
    if isinstance(period, bool) or not isinstance(period, int) or period < 0:
        raise TilingError(f"weight_period must be a non-negative integer, got {period!r}", "weight")
    n = element_count(shape)
    if n and (period < 1 or n % period):
        raise TilingError(
            f"a {variant.weight} weight's period {period} must be >= 1 and divide the {n} elements", "weight"
        )
    return period


def tile_kernel(
    kernel: ElementwiseKernel,
    shape: Sequence[int],
    params: TilingParams | None = None,
    soc: str | SocProfile = "Ascend910B2",
    scheme: Scheme = "exact",
    variant: Variant | None = None,
    classes: int = 0,
    weight_period: int = 0,
) -> TilingData:
    """Tile any elementwise kernel: the BCE front door above, or a generic one for the model
    (whose variant is its dtype with reduction none and no weight)."""
    profile = soc if isinstance(soc, SocProfile) else load_soc(soc)
    v = variant if variant is not None else Variant(kernel.dtype, "none", weight="none")
    n = element_count(shape)
    rp = resolve_params(params, kernel, profile, scheme)
    key = tiling_key(v, rp.buffer_num)
    values, block_dim = _engine.tiling_fields(
        scheme,
        n,
        kernel.elem_bytes,
        rp.block_bytes,
        rp.tile_bytes,
        rp.core_num,
        REDUCTION_ID[v.reduction],
        classes,
        weight_period,
        key,
    )  # the host tiling's own ExactFields / SeedFields (bce_grad_tiling_core.h)
    f = TilingFields(*values)
    return TilingData(
        fields=f,
        block_dim=block_dim,
        tiling_key=key,
        scheme=scheme,
        soc=profile.name,
        shape=tuple(shape),
        variant=v,
        params=rp,
        kernel=kernel,
    )


def params_from_dict(d: dict[str, int | None] | None) -> TilingParams:
    """TilingParams from a mapping, rejecting unknown keys by name."""
    if not d:
        return TilingParams()
    known = {f.name for f in fields(TilingParams)}
    unknown = sorted(set(d) - known)
    if unknown:
        raise TilingError(f"unknown tiling parameter(s): {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    return TilingParams(**d)


__all__ = [
    "SCHEMES",
    "ResolvedParams",
    "TilingData",
    "TilingError",
    "TilingFields",
    "TilingParams",
    "compute_tiling",
    "element_count",
]
