"""What one BinaryCrossEntropyGrad call computes, apart from its size: the variant.

One frozen, hashable value, checked once when it is made, and passed whole wherever the same five
facts used to travel as loose arguments (tilings, table keys, studies, service queries). It mirrors
the C++ ``bce_grad::Variant`` of ``kernel/op_host/bce_grad_tiling_core.h``; the C++ one also carries
the periods (the class count C of a last-dim pos_weight, a broadcast weight's period or row length),
which here come with the shape (``Broadcast``).

weight and pos_weight are *broadcast operands*: PyTorch lets them take any shape broadcastable to the
input, and ``broadcast_of`` maps such a shape onto one of five forms the kernel reads with the least
traffic: ``none``; ``full`` (the input's shape: a stream); ``last_dim`` (a period P along the trailing
dims, [C] or [1, C] or [B, C]: each core writes the periodic row once into its workspace, every tile
reads its window from there); ``rows`` (one value per row of R trailing elements, [N, 1] or [A, B, 1]:
each tile reads its few row values and expands them in UB); ``scalar`` ([1] or []: read once per
core, never a stream).

Names: the requirement calls the probabilities ``logits`` (its formula is ``w*g*(p - y)``); the
kernel's parameters keep that name at the CANN boundary, bcetune's own API says ``p``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal, get_args

from tiling_model.dtypes import (
    DTYPE_ID,
    FLOAT_DTYPES,
    REDUCTION_ID,
    Dtype,
    Reduction,
    UnsupportedError,
    check_combination,
)

BroadcastForm = Literal["none", "full", "last_dim", "rows", "scalar"]
PosWeightForm = Literal["none", "full", "last_dim"]
Wrt = Literal["logit", "probability"]
Mode = Literal["grad", "fused"]
#: How a broadcast operand is read (the order is the tiling key's digit: none 0 ... scalar 4).
BROADCAST_FORMS: tuple[BroadcastForm, ...] = get_args(BroadcastForm)
#: weight: every form.
WEIGHT_FORMS: tuple[BroadcastForm, ...] = BROADCAST_FORMS
#: The forms with a period (P of last_dim, R of rows): the struct's weightPeriod, the model's row length.
PERIODIC_FORMS: tuple[BroadcastForm, ...] = ("last_dim", "rows")
#: The weight forms the shipped tables tune; the others are re-fitted from the ``full`` form's bucket.
TUNED_WEIGHT_FORMS: tuple[BroadcastForm, ...] = ("full", "none")
#: pos_weight absent, of the input's shape, or [C] along the last dim (rows and scalar: not yet in the kernel).
POS_WEIGHT_FORMS: tuple[PosWeightForm, ...] = get_args(PosWeightForm)
#: The gradient with respect to the logit x (p = sigmoid(x): the requirement's formula) or to p.
WRT_FORMS: tuple[Wrt, ...] = get_args(Wrt)
#: The kernel mode: ``grad`` is BinaryCrossEntropyGrad (the requirement's kernel, z = w*g*(p - y));
#: ``fused`` is BCEWithLogits' loss and gradient in one pass (kernel/op_kernel/bce_with_logits_fused.cpp:
#: reads x, y and the weights once, writes dx and the loss or per-core sums; no grad input).
MODES: tuple[Mode, ...] = get_args(Mode)


@dataclass(frozen=True)
class Variant:
    """dtype, reduction, weight form, pos_weight form, wrt, kernel mode: checked on construction. ``weight``
    also takes True / False (the input's shape / absent: ``full`` / ``none``)."""

    dtype: Dtype
    reduction: Reduction = "none"
    weight: BroadcastForm = "full"
    pos_weight: PosWeightForm = "none"
    wrt: Wrt = "logit"
    mode: Mode = "grad"

    def __post_init__(self) -> None:
        check_combination(self.dtype, self.reduction)
        if isinstance(self.weight, bool):
            object.__setattr__(self, "weight", "full" if self.weight else "none")
        if self.weight not in WEIGHT_FORMS:
            raise UnsupportedError(
                f"unknown weight form {self.weight!r}; known: {', '.join(WEIGHT_FORMS)} (or true / false)"
            )
        if self.pos_weight not in POS_WEIGHT_FORMS:
            raise UnsupportedError(f"unknown pos_weight form {self.pos_weight!r}; known: {', '.join(POS_WEIGHT_FORMS)}")
        if self.wrt not in WRT_FORMS:
            raise UnsupportedError(f"unknown wrt {self.wrt!r}; known: {', '.join(WRT_FORMS)}")
        if self.wrt == "probability" and self.dtype not in FLOAT_DTYPES:
            raise UnsupportedError("wrt='probability' needs a float dtype (A2 has no integer Div)")
        if self.mode not in MODES:
            raise UnsupportedError(f"unknown kernel mode {self.mode!r}; known: {', '.join(MODES)}")
        if self.mode == "fused" and (self.dtype not in FLOAT_DTYPES or self.wrt != "logit"):
            raise UnsupportedError(
                "mode='fused' (BCEWithLogits' loss and gradient) needs a float dtype and wrt='logit'"
            )
        if self.pos_weight != "none" and self.wrt == "probability":
            raise UnsupportedError(
                "pos_weight applies to wrt='logit' only (the probability gradient has no pos_weight term)"
            )

    @property
    def has_weight(self) -> bool:
        return self.weight != "none"

    @property
    def ids(self) -> tuple[int, int, int, int, int, int]:
        """(dtype, reduction, weight form, pos_weight form, wrt, mode) as the C++ ``bce_grad::Variant`` numbers
        them (and the tiling key's digits)."""
        return (
            DTYPE_ID[self.dtype], REDUCTION_ID[self.reduction], BROADCAST_FORMS.index(self.weight),
            BROADCAST_FORMS.index(self.pos_weight), WRT_FORMS.index(self.wrt), MODES.index(self.mode),
        )  # fmt: skip

    @property
    def tuned_base(self) -> Variant:
        """The variant whose tuned buckets seed this one's re-fit: itself for a tuned weight form, the
        ``full`` weight's otherwise (the same streams but one, so the same pipeline depth suits it)."""
        return self if self.weight in TUNED_WEIGHT_FORMS else replace(self, weight="full")

    def label(self) -> str:
        """Short human form, e.g. ``float16/mean/w/logit/pw_none`` (``w_rows``, ``w_last_dim``, ...
        for a broadcast weight; ``/fused`` after it for the fused mode)."""
        w = {"full": "w", "none": "nw"}.get(self.weight, f"w_{self.weight}")
        return f"{self.dtype}/{self.reduction}/{w}/{self.wrt}/pw_{self.pos_weight}" + (
            "/fused" if self.mode == "fused" else ""
        )


def every_variant(weights: tuple[BroadcastForm, ...] = TUNED_WEIGHT_FORMS) -> list[Variant]:
    """Every variant the kernel computes with these weight forms (default: what a full sweep tunes)."""
    from tiling_model.dtypes import valid_combinations

    out = []
    for dtype, reduction in valid_combinations():
        for wrt in WRT_FORMS:
            for pw in POS_WEIGHT_FORMS:
                for weight in weights:
                    try:
                        out.append(Variant(dtype, reduction, weight, pw, wrt))
                    except UnsupportedError:
                        continue
    return out


@dataclass(frozen=True)
class Broadcast:
    """How one operand's shape broadcasts onto the input's: its form and its period (C of last_dim,
    the elements a last_dim row repeats after; R of rows, the elements one value covers; else 0)."""

    form: BroadcastForm
    period: int = 0


def broadcast_of(
    name: str, shape: list[int] | tuple[int, ...] | None, input_shape: list[int] | tuple[int, ...]
) -> Broadcast:
    """The form of an operand of ``shape`` broadcast to ``input_shape`` as PyTorch broadcasts (dims
    aligned from the right, a 1 stretches): None is absent; all dims stretched is ``scalar``; none
    stretched is ``full``; the leading dims stretched and the trailing ones matched is ``last_dim``
    with P their product; the leading matched and the trailing stretched is ``rows`` with R the
    product of the stretched dims. A shape that does not broadcast, is larger than the input, or
    stretches dims in both places (e.g. [A, 1, C] against [A, B, C]) is refused, naming the shape."""
    if shape is None:
        return Broadcast("none")
    shape, inp = [int(d) for d in shape], [int(d) for d in input_shape]
    if len(shape) > len(inp) and any(d != 1 for d in shape[: len(shape) - len(inp)]):
        raise UnsupportedError(f"{name} of shape {shape} has more dims than the input {inp}")
    shape = shape[max(len(shape) - len(inp), 0) :]
    aligned = [1] * (len(inp) - len(shape)) + shape
    stretched = []
    for w, d in zip(aligned, inp, strict=True):
        if w == d:
            stretched.append(False if d != 1 else None)  # a dim of 1 goes with either side
        elif w == 1:
            stretched.append(True)
        else:
            raise UnsupportedError(f"{name} of shape {shape} does not broadcast to the input's shape {inp}")
    marks = [s for s in stretched if s is not None]
    if not any(marks):
        return Broadcast("full")
    if all(marks):
        return Broadcast("scalar")
    first_kept = marks.index(False)
    if all(marks[:first_kept]) and not any(marks[first_kept:]):
        period = 1
        for s, d in zip(stretched, inp, strict=True):
            period *= d if s is False else 1
        return Broadcast("last_dim", period)
    first_stretched = marks.index(True)
    if not any(marks[:first_stretched]) and all(marks[first_stretched:]):
        rows = 1
        for s, d in zip(stretched, inp, strict=True):
            rows *= d if s is True else 1
        return Broadcast("rows", rows)
    raise UnsupportedError(
        f"{name} of shape {shape} broadcasts to {inp} with stretched dims both before and after kept ones; "
        "the kernel reads full, last_dim ([.., C]), rows ([.., 1]) and scalar forms: materialise this one"
    )


def weight_spec(spec: bool | str | list[int] | tuple[int, ...], input_shape: list[int] | tuple[int, ...]) -> Broadcast:
    """The weight's form and period as a user names it: true / false (full / none), a form (a named
    last_dim or rows takes the last dim as its period: a [C] or [..., 1] weight), or its shape
    (``broadcast_of``). UnsupportedError names what is wrong."""
    if isinstance(spec, bool):
        return Broadcast("full" if spec else "none")
    if isinstance(spec, list | tuple):
        return broadcast_of("weight", spec, input_shape)
    if spec not in WEIGHT_FORMS:
        raise UnsupportedError(f"unknown weight form {spec!r}; known: {', '.join(WEIGHT_FORMS)} (or true / false)")
    if spec in PERIODIC_FORMS:
        if not len(input_shape):
            raise UnsupportedError(f"weight={spec!r} needs a shape with at least one dim (its period is the last dim)")
        return Broadcast(spec, int(input_shape[-1]))
    return Broadcast(spec)


def operand_shape(form: BroadcastForm, shape: tuple[int, ...] | list[int], period: int = 0) -> tuple[int, ...] | None:
    """The smallest operand shape of this form for an input of ``shape`` (the inverse of
    ``broadcast_of``): None, the shape itself, [1], the trailing dims whose product is the period
    (last_dim), or the leading dims with the trailing ones 1 (rows, their product the period).
    ``period`` 0 means the last dim."""
    shape = tuple(int(d) for d in shape)
    if form == "none":
        return None
    if form == "full":
        return shape
    if form == "scalar":
        return (1,)
    p = period or (shape[-1] if shape else 1)
    for cut in range(len(shape), -1, -1):  # the fewest trailing dims whose product is the period
        tail = 1
        for d in shape[cut:]:
            tail *= d
        if tail == p and cut < len(shape):
            return shape[cut:] if form == "last_dim" else shape[:cut] + (1,) * (len(shape) - cut)
    raise UnsupportedError(f"no trailing dims of {list(shape)} multiply to the {form} period {p}")


def pos_weight_of(shape: list[int] | tuple[int, ...] | None, input_shape: list[int] | tuple[int, ...]) -> Broadcast:
    """pos_weight's form: ``broadcast_of``, then what the kernel reads of pos_weight: absent, the
    input's shape, or [C] along the last dim (a single value is that when the last dim is 1); else
    refused, naming the shape."""
    b = broadcast_of("pos_weight", shape, input_shape)
    last = int(input_shape[-1]) if len(input_shape) else 1
    if b.form == "scalar" and last == 1:
        return Broadcast("last_dim", 1)
    if b.form in ("none", "full") or (b.form == "last_dim" and b.period == last):
        return b
    raise UnsupportedError(
        f"pos_weight of shape {list(shape or [])} broadcasts to {list(input_shape)} as {b.form}; the kernel reads "
        f"pos_weight of the input's shape or [C] along the last dim (C = {last})"
    )
