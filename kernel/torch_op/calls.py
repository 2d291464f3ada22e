"""What a call of ``bcetune::bce_grad`` computes: its kernel variant and weight period, from its operands'
shapes and dtype names only (so the fake implementation checks exactly what the real ones check)."""

from __future__ import annotations

import torch
from torch import Tensor

from tiling_model import BadRequest, Variant
from tiling_model.dtypes import DTYPES, REDUCTIONS
from tiling_model.variant import WRT_FORMS, broadcast_of, pos_weight_of

#: torch dtype -> the kernel's dtype name (the service's spelling).
DTYPE_NAMES: dict[torch.dtype, str] = {
    torch.float32: "float32",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
    torch.int32: "int32",
    torch.int16: "int16",
}
Shape = tuple[int, ...]
#: (grad, p, y, weight, pos_weight) shapes; None for an absent operand.
Shapes = tuple[Shape, Shape, Shape, Shape | None, Shape | None]


def dtype_name(dtype: torch.dtype) -> str:
    return DTYPE_NAMES.get(dtype) or str(dtype).removeprefix("torch.")


def call_variant(
    shapes: Shapes, dtypes: tuple[str, ...], reduction: str, wrt: str, mode: str = "grad"
) -> tuple[Variant, int]:
    """The kernel variant and weight period of a call, from its operands' shapes and dtype names
    (grad, p, y, weight, pos_weight; absent ones None). BadRequest (a ValueError) names what is wrong;
    it runs on shapes only, so the fake implementation checks exactly what the real ones check. The fused
    mode (``bce_with_logits_fused``) has no grad: its shape is None and p is the logits."""
    if reduction not in REDUCTIONS:
        raise BadRequest(f"reduction={reduction!r}; one of {', '.join(REDUCTIONS)}")
    if wrt not in WRT_FORMS:
        raise BadRequest(f"wrt={wrt!r}; one of {', '.join(WRT_FORMS)}")
    g_shape, shape, y_shape, w_shape, pw_shape = shapes
    dtype = dtypes[1]
    if dtype not in DTYPES:
        raise BadRequest(f"p is {dtype}; the kernel takes {', '.join(DTYPES)}")
    names = ("grad", "p", "y", "weight", "pos_weight")
    fused = mode == "fused"
    for name, other in zip(names, dtypes, strict=True):
        if other not in (dtype, ""):
            raise BadRequest(f"{name} is {other} but p is {dtype}: all operands share one dtype")
    if y_shape != shape:
        raise BadRequest(f"y has shape {list(y_shape)} but p has {list(shape)}")
    if fused:
        if g_shape is not None:
            raise BadRequest("the fused loss takes no grad (its gradient is at grad_output 1)")
    elif reduction == "none" and g_shape != shape:
        raise BadRequest(f"reduction='none' takes grad of p's shape {list(shape)}, got {list(g_shape)}")
    elif reduction != "none" and numel(g_shape) != 1:
        raise BadRequest(f"reduction={reduction!r} takes one scalar grad, got shape {list(g_shape)}")
    w = broadcast_of("weight", w_shape, shape)
    pw = pos_weight_of(pw_shape, shape)
    return Variant(dtype, reduction, w.form, pw.form, wrt, mode), w.period  # type: ignore[arg-type]


def numel(shape: Shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def operands(*tensors: Tensor | None) -> tuple[Shapes, tuple[str, ...]]:
    shapes = tuple(None if t is None else tuple(t.shape) for t in tensors)
    dtypes = tuple("" if t is None else dtype_name(t.dtype) for t in tensors)
    return shapes, dtypes  # type: ignore[return-value]
