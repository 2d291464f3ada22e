"""Generic description of an elementwise vector kernel, and the BinaryCrossEntropyGrad variants.

One description says what a kernel streams (inputs read element by element, outputs written,
scalars), which vector instructions it issues per tile and what else it keeps in UB. The UB
budget, the queue limit, validation and the pipeline simulator all read it, so the same
simulator predicts any elementwise kernel (e.g. the Sigmoid used for calibration) and every
BCE-grad variant from one place.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any, Literal, cast

from tiling_model import _engine
from tiling_model.dtypes import DTYPE_BYTES, FLOAT_DTYPES, Dtype
from tiling_model.errors import BadRequest
from tiling_model.variant import PERIODIC_FORMS, Variant

#: AscendC: at most 8 queue buffers carrying sync events per TPosition on A2/310B
#: (ascendc-api.md s2.5, "max buffer number in same queue position"): the engine's, the one queue limit.
MAX_BUFFERS_PER_POSITION = _engine.MAX_BUFFERS_PER_POSITION
#: The seed's sum/mean kernel keeps the scalar grad in a 16-element queue (the host tiling's constant).
SEED_SCALAR_QUEUE_ELEMS: int = _engine.SEED_SCALAR_QUEUE_ELEMS
#: Staging buffer (elements) through which a core writes its periodic pos_weight row.
LAST_DIM_STAGE_ELEMS: int = _engine.LAST_DIM_STAGE_ELEMS
#: Row copies shorter than this are replicated in UB first, so small C costs few DMAs.
LAST_DIM_SUPER_ELEMS: int = _engine.LAST_DIM_SUPER_ELEMS

#: Cycles per 256-B repeat on one 910B1 AIV, fp32 unless the key says otherwise (MSKPP,
#: data/mskpp_vector_instr_910b1.csv): binary ops 2, tensor-scalar and unary ops 1, exp/ln/sqrt
#: fp32 2 (fp16 3.9/3.9/4), div 4, VCONV ~1 (fp32->fp16 0.49), vgather u32 12.2.
CYCLES_PER_REPEAT: dict[str, float] = {
    "add": 2.0, "sub": 2.0, "mul": 2.0, "max": 2.0, "min": 2.0, "div": 4.0,
    "compare": 2.0, "select": 2.0,
    "adds": 1.0, "muls": 1.0, "maxs": 1.0, "mins": 1.0, "abs": 1.0, "relu": 1.0, "rec": 1.0, "duplicate": 1.0,
    "exp": 2.0, "ln": 2.0, "sqrt": 2.0, "cast": 1.0, "cast_f32_f16": 0.49, "gather": 12.2,
    "reduce_sum": 3.0,  # VCADD fp32 (ReduceSum's repeats)
}  # fmt: skip
CYCLES_HALF_OVERRIDES: dict[str, float] = {"exp": 3.9, "ln": 3.9, "sqrt": 4.0, "div": 4.1}
VECTOR_OPS = tuple(sorted(CYCLES_PER_REPEAT))
#: Elementwise kernels the calibration data times, by name: (full inputs, outputs, vector ops per tile).
NAMED_KERNELS: dict[str, tuple[int, int, tuple[str, ...]]] = {"sigmoid": (1, 1, ("muls", "exp", "adds", "rec"))}
#: The requirement's tiling and kernel ("seed") or bcetune's ("exact"): the kernel plan differs.
Scheme = Literal["seed", "exact"]
SCHEMES: tuple[Scheme, ...] = ("seed", "exact")


@dataclass(frozen=True)
class VectorOp:
    name: str
    operand_bytes: int  # bytes per element of the widest operand: sets the repeat count

    @property
    def cycles_per_repeat(self) -> float:
        if self.operand_bytes == 2 and self.name in CYCLES_HALF_OVERRIDES:
            return CYCLES_HALF_OVERRIDES[self.name]
        return CYCLES_PER_REPEAT[self.name]


@dataclass(frozen=True)
class ElementwiseKernel:
    """Streams and UB buffers of one kernel; tiles are counted in I/O-dtype elements."""

    name: str
    dtype: Dtype
    full_inputs: tuple[str, ...]  # read element by element through VECIN queues
    outputs: tuple[str, ...]  # written element by element through VECOUT queues
    scalar_inputs: tuple[str, ...] = ()  # read as one value each
    ops: tuple[VectorOp, ...] = ()  # vector instructions per tile
    temp_bytes_per_elem: int = 0  # TBuf bytes per tile element (compute-dtype temporaries)
    scalar_queue_bytes: int = 0  # a small VECIN queue per buffer (the seed's grad scalar)
    row_bytes: int = 0  # a per-core staging TBuf (the last-dim rows' copy into the workspace)
    temp_buffers: int = 0  # TBufs the temporaries are split into (each rounded up to 32 B)
    # Of full_inputs, how many are last-dim operands: each core writes its periodic row into its GM
    # workspace once (a row copy through the staging TBuf), every tile reads its window from there. The
    # reads cost MTE2 time like any stream, but the workspace stays in L2: HBM sees the row only.
    workspace_inputs: int = 0
    # Of full_inputs, how many are row operands (one value per ``row_len`` elements): a tile reads its
    # ceil(len / R) + 1 values through its queue and expands them in UB, one Duplicate per row (of
    # ``row_expand_bytes`` per element) into a TBuf counted in the temporaries.
    row_inputs: int = 0
    row_len: int = 0
    row_expand_bytes: int = 0
    # bcetune's own kernel: a device's knob correction (SocProfile.knob_correction) applies to its
    # predictions; not to other operators' kernels (the calibration's) or the requirement's
    knob_corrected: bool = False
    sum_bytes: int = 0  # the fused mode's ReduceSum destination TBuf (sum / mean)

    def __hash__(self) -> int:
        """The fields' hash, computed once: kernels key the caches of the hot path (a frozen value)."""
        try:
            return self.__dict__["_hash"]  # type: ignore[no-any-return]
        except KeyError:
            h = hash(tuple(getattr(self, f.name) for f in dataclasses.fields(self)))
            object.__setattr__(self, "_hash", h)
            return h

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without the cached hash: str hashes differ from one process to the next."""
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    @property
    def elem_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def vecin_queues(self) -> int:
        return _engine.vecin_queues(len(self.full_inputs), self.scalar_queue_bytes)

    @property
    def vecout_queues(self) -> int:
        return len(self.outputs)

    @property
    def streams(self) -> int:
        """Queues of full tiles (UB, queue limits, per-tile DMAs): every full input and output."""
        return len(self.full_inputs) + len(self.outputs)

    @property
    def hbm_streams(self) -> int:
        """Streams whose every element crosses HBM (the workspace and row operands do not)."""
        return self.streams - self.workspace_inputs - self.row_inputs

    def hbm_bytes(self, n: Any) -> Any:
        """Bytes a launch over ``n`` elements moves element by element (what L2's footprint and the
        traffic count before per-core rows and scalars): the dense streams, plus n / R values of each
        row operand."""
        rows = self.row_inputs * (n / self.row_len) if self.row_inputs else 0.0
        return (self.hbm_streams * n + rows) * self.elem_bytes

    @functools.lru_cache(maxsize=4096)  # noqa: B019 - kernels are frozen values, few and long-lived
    def allowed_buffer_nums(self, choices: tuple[int, ...] = (1, 2, 3, 4)) -> tuple[int, ...]:
        """The BUFFER_NUMs of ``choices`` the queue limit allows (the engine's QueueLimitAllows)."""
        return tuple(b for b in choices if _engine.queue_limit_allows(self.vecin_queues, self.vecout_queues, b))

    def buffer_plan(self) -> _engine.BufferPlan:
        """The kernel's UB plan in the engine (``BufferPlan``, bce_grad_tiling_core.h): the one UB arithmetic,
        shared with the CANN host tiling."""
        return _engine.BufferPlan(
            full_inputs=len(self.full_inputs),
            outputs=len(self.outputs),
            elem_bytes=self.elem_bytes,
            temp_bytes_per_elem=self.temp_bytes_per_elem,
            scalar_queue_bytes=self.scalar_queue_bytes,
            row_bytes=self.row_bytes,
            temp_buffers=self.temp_buffers,
            sum_bytes=self.sum_bytes,
        )

    def ub_buffers(self, tile_bytes: int, buffer_num: int) -> tuple[tuple[str, str, int, int], ...]:
        """Every buffer InitBuffer asks for, as (name, role, count, bytes each; each rounded up to 32 B,
        as TPipe does): the queues x BUFFER_NUM, the TBuf temporaries, the seed's scalar queue, the
        pos_weight row's staging. ``ub_bytes`` is their sum; the explorer draws them."""
        plan = self.buffer_plan()
        queue = plan.queue_bytes(tile_bytes)
        out = [(name, "VECIN queue", buffer_num, queue) for name in self.full_inputs]
        out += [(name, "VECOUT queue", buffer_num, queue) for name in self.outputs]
        temps = plan.temp_count
        temp = plan.temp_bytes(tile_bytes)
        out += [(f"temp{i}" if self.temp_buffers else "temp", "TBuf", 1, temp) for i in range(temps)]
        if plan.scalar_queue_buffer:
            out.append(("grad", "scalar queue", buffer_num, plan.scalar_queue_buffer))
        if plan.row_buffer:
            out.append(("last-dim row", "staging TBuf", 1, plan.row_buffer))
        if plan.sum_buffer:
            out.append(("loss sum", "TBuf", 1, plan.sum_buffer))
        return tuple(out)

    @functools.lru_cache(maxsize=65536)  # noqa: B019 - kernels are frozen values, few and long-lived
    def ub_bytes(self, tile_bytes: int, buffer_num: int) -> int:
        """UB bytes InitBuffer asks for (each buffer rounded up to 32 B, as TPipe does)."""
        return self.buffer_plan().ub_bytes(tile_bytes, buffer_num)

    @functools.lru_cache(maxsize=4096)  # noqa: B019 - kernels are frozen values, few and long-lived
    def max_tile_bytes(self, ub_budget: int, buffer_num: int) -> int:
        """Largest 32-B multiple tile whose buffers fit in ``ub_budget`` (0 if none)."""
        return self.buffer_plan().max_tile_bytes(ub_budget, buffer_num)


def elementwise_kernel(
    dtype: str, inputs: int, outputs: int, ops: list[str] | tuple[str, ...], scalars: int = 0, name: str = "elementwise"
) -> ElementwiseKernel:
    """A generic elementwise kernel: ``ops`` are instruction names of the MSKPP table.

    Half types compute in float32 (as bcetune's kernels do on A2): each input is cast up,
    each output cast down, and two fp32 temporaries are kept per tile element.
    """
    if dtype not in DTYPE_BYTES:
        raise BadRequest(f"unknown dtype {dtype!r}")
    if inputs < 1 or outputs < 1 or scalars < 0:
        raise BadRequest("an elementwise kernel needs at least one input and one output")
    unknown = [op for op in ops if op not in CYCLES_PER_REPEAT]
    if unknown:
        raise BadRequest(f"unknown vector op(s) {', '.join(unknown)}; known: {', '.join(VECTOR_OPS)}")
    elem = DTYPE_BYTES[dtype]
    widen = dtype in FLOAT_DTYPES and elem == 2
    work = 4 if widen else elem
    seq = [VectorOp("cast", 4)] * inputs if widen else []
    seq += [VectorOp(op, work) for op in ops]
    if widen:
        seq += [VectorOp("cast_f32_f16" if dtype == "float16" else "cast", 4)] * outputs
    return ElementwiseKernel(
        name=name,
        dtype=cast(Dtype, dtype),  # checked above
        full_inputs=tuple(f"x{i}" for i in range(inputs)),
        outputs=tuple(f"y{i}" for i in range(outputs)),
        scalar_inputs=tuple(f"s{i}" for i in range(scalars)),
        ops=tuple(seq),
        temp_bytes_per_elem=2 * 4 if widen else 0,
        temp_buffers=2 if widen else 0,
    )


@functools.lru_cache(maxsize=4096)
def bce_grad_kernel(
    variant: Variant, scheme: Scheme = "exact", classes: int = 0, weight_period: int = 0
) -> ElementwiseKernel:
    """The buffer plan and instruction list of the kernel that runs a tiling of this scheme.

    ``seed``: the requirement's kernel: four VECIN queues and one VECOUT queue of full tiles
    (grad becomes a 16-element queue for sum/mean; weight is always read), computed natively.
    ``exact``: bcetune's kernel (``kernel/op_kernel/bce_grad.h``), instruction for instruction:
    absent inputs are not read, a scalar grad is read once with no queue, half types compute in
    float32 in two or three TBuf temporaries, float32 and ints compute in place in the input
    tiles. wrt="logit": ``z = w*g*((pw*y + 1 - y)*p - pw*y)`` (``w*g*(p - y)`` without
    pos_weight); wrt="probability": ``z = w*g*(p - y) / max(p*(1 - p), 1e-12)`` (floats only).

    Broadcast operands (variant.py): "full" is one more stream. "last_dim" (pos_weight [C], a weight
    of period P) is one more queue too, read from the core's workspace: each core first writes the
    periodic row into it (through a staging buffer of ``LAST_DIM_STAGE_ELEMS``, shared by both
    operands), then reads each tile's window with byte-granular DataCopyPad; HBM sees the row only.
    A "rows" weight (R = ``weight_period`` elements per value) reads ceil(len/R)+1 values per tile
    through its queue and expands them with one Duplicate per row into a compute-type TBuf (no cast).
    A "scalar" weight is read once per core, like the grad of sum/mean, and multiplies with Muls.
    ``classes`` only checks C >= 1: UB use does not depend on C (nor on a last-dim weight's P).
    """
    plan = variant_plan(variant, scheme)
    full = tuple(name for name, bit in _engine.INPUT_BITS if plan.input_mask & bit)
    if scheme == "seed":
        return _seed_kernel(variant, plan, full)
    if variant.pos_weight == "last_dim" and classes < 1:
        raise BadRequest("pos_weight='last_dim' needs the class count C >= 1 (the last dim)")
    if variant.weight in PERIODIC_FORMS and weight_period < 1:
        raise BadRequest(f"weight={variant.weight!r} needs its period >= 1 (elements per row or per value)")
    v, elem = variant, DTYPE_BYTES[variant.dtype]
    widen = v.dtype in FLOAT_DTYPES and elem == 2
    work = 4 if widen else elem
    rows = 1 if v.weight == "rows" else 0
    if v.mode == "fused":
        return _fused_kernel(v, plan, full, widen, rows, weight_period)
    ops = [VectorOp("cast", 4)] * (len(full) - rows) if widen else []
    ops += [VectorOp(o, work) for o in _term_ops(v)]
    ops.append(VectorOp("mul" if v.reduction == "none" else "muls", work))  # grad (scaled by 1/N for mean)
    if v.has_weight:
        ops.append(VectorOp("muls" if v.weight == "scalar" else "mul", work))
    ops += [VectorOp("cast_f32_f16" if v.dtype == "float16" else "cast", 4)] if widen else []
    workspace = (v.weight == "last_dim") + (v.pos_weight == "last_dim")
    scalar = (() if v.reduction == "none" else ("grad",)) + (("weight",) if v.weight == "scalar" else ())
    name = f"bce_grad/{v.wrt}" + (f"/w_{v.weight}" if v.weight not in ("full", "none") else "")
    name += f"/pw_{v.pos_weight}" if v.pos_weight != "none" else ""
    return ElementwiseKernel(
        name, v.dtype, full, ("z",), scalar, tuple(ops), plan.temp_bytes_per_elem, 0, plan.row_bytes,
        plan.temp_buffers, workspace_inputs=workspace, row_inputs=rows, row_len=weight_period if rows else 0,
        row_expand_bytes=work if rows else 0, knob_corrected=True,
    )  # fmt: skip


def variant_plan(variant: Variant, scheme: Scheme = "exact") -> _engine.BufferPlan:
    """The kernel's UB plan for a variant, from the host tiling's own ``MakePlan`` (which inputs it reads,
    its temporaries, the last-dim rows' staging, the seed's scalar queue); BadRequest names what no kernel
    of the scheme runs."""
    try:
        return _engine.bce_grad_plan(*variant.ids, scheme)
    except ValueError as e:
        raise BadRequest(str(e)) from None


def _fused_kernel(
    v: Variant, plan: _engine.BufferPlan, full: tuple[str, ...], widen: bool, rows: int, weight_period: int
) -> ElementwiseKernel:
    """The fused mode (bce_grad.h FusedCompute), instruction for instruction: softplus(-x) with the log1p
    correction, sigmoid(x), the pos_weight coefficient, the weight, 1/N for mean; dx and the loss out (none), or
    the tile's loss summed (ReduceSum) for sum / mean. Everything computes in float32."""
    none = v.reduction == "none"
    names = ["cast"] * (len(full) - rows) if widen else []
    names += ["abs", "muls", "exp", "adds", "adds", "sub", "div", "ln", "sub", "muls", "maxs", "add"]  # softplus(-x)
    names += ["muls", "exp", "adds", "duplicate", "div"]  # sigmoid(x)
    names += ["adds", "mul", "adds", "mul", "mul", "sub", "mul"] if v.pos_weight != "none" else ["sub"]
    names += ["muls", "adds", "mul", "add"]  # + (1 - y) * x
    if v.has_weight:
        names += ["muls", "muls"] if v.weight == "scalar" else ["mul", "mul"]
    names += ["muls"] if v.reduction == "mean" else []
    out = "cast_f32_f16" if v.dtype == "float16" else "cast"
    names += ([out] * (2 if none else 1)) if widen else []
    names += [] if none else ["reduce_sum"]
    ops = tuple(VectorOp(o, 4) for o in names)
    workspace = (v.weight == "last_dim") + (v.pos_weight == "last_dim")
    scalar = ("weight",) if v.weight == "scalar" else ()
    name = "bce_with_logits_fused" + (f"/w_{v.weight}" if v.weight not in ("full", "none") else "")
    name += f"/pw_{v.pos_weight}" if v.pos_weight != "none" else ""
    return ElementwiseKernel(
        name, v.dtype, full, ("dx", "loss") if none else ("dx",), scalar, ops, plan.temp_bytes_per_elem, 0,
        plan.row_bytes, plan.temp_buffers, workspace_inputs=workspace, row_inputs=rows,
        row_len=weight_period if rows else 0, row_expand_bytes=4 if rows else 0, knob_corrected=False,
        sum_bytes=plan.sum_bytes,
    )  # fmt: skip


def _term_ops(v: Variant) -> tuple[str, ...]:
    """The instructions of the variant's term (before the grad and weight multiplies), as bce_grad.h
    computes it (its temporaries are the plan's)."""
    if v.pos_weight != "none":
        # pw*y; pw*y - y; + 1 -> coef; coef*p; - pw*y (in place; the pw tile holds pw*y, or C = float(pw))
        return ("mul", "sub", "adds", "mul", "sub")
    if v.wrt == "probability":
        # C = max(p*(1 - p), 1e-12) in a temporary; (p - y) / C
        return ("muls", "adds", "mul", "maxs", "sub", "div")
    return ("sub",)


def _seed_kernel(v: Variant, plan: _engine.BufferPlan, full: tuple[str, ...]) -> ElementwiseKernel:
    """The requirement's kernel: four VECIN queues and one VECOUT queue of full tiles (grad a
    16-element queue for sum/mean), weight always read, computed natively in the I/O dtype."""
    elem = DTYPE_BYTES[v.dtype]
    none = v.reduction == "none"
    ops = (VectorOp("sub", elem), VectorOp("mul" if none else "muls", elem), VectorOp("mul", elem))
    scalar = () if none else ("grad",)
    return ElementwiseKernel("bce_grad/seed", v.dtype, full, ("z",), scalar, ops, 0, plan.scalar_queue_bytes)
