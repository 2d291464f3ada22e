"""The operator ``bcetune::bce_with_logits_fused``: BCEWithLogits's loss and its gradient wrt the logits in
one call, so the loss keeps only the gradient for backward (PyTorch's own keeps the logits and the target,
and its backward reads them again).

Per element, with ``lw = 1 + (pw - 1) * y`` (``pw`` the pos_weight, 1 without one) and ``scale`` 1/N for
mean (else 1), in a form that neither overflows nor loses the small side:

    loss = w * (lw * softplus(x) - pw * y * x)      summed (times scale) for sum and mean
    grad = w * scale * (lw * sigmoid(x) - pw * y)    d loss / d x at grad_output 1

(the loss is PyTorch's ``(1 - y) x + lw softplus(-x)`` rearranged so it takes one pass over x).

Implementations: CPU, ATen calls in the input's dtype as PyTorch's own CPU loss makes them (``softplus`` and
``sigmoid`` of the logits, then in-place arithmetic; ``make bench-loss`` times it against PyTorch's forward
plus backward); fake, for ``torch.compile``; ``PrivateUse1`` (an Ascend NPU): the launch extension's, one launch of
the Ascend C kernel's fused mode (``kernel/op_kernel/bce_with_logits_fused.cpp``; NOT RUN here: no NPU), whose
numerics the CPU twin runs (``kernel.cpu.bce_with_logits_fused``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from kernel.torch_op.op import _LIB

FUSED_OP_NAME = "bcetune::bce_with_logits_fused"
FUSED_SCHEMA = "(Tensor input, Tensor target, Tensor? weight, Tensor? pos_weight, str reduction) -> (Tensor, Tensor)"
REDUCTIONS = ("none", "sum", "mean")

_LIB.define("bce_with_logits_fused" + FUSED_SCHEMA)


def _check(input: Tensor, target: Tensor, weight: Tensor | None, pos_weight: Tensor | None, reduction: str) -> None:
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction {reduction!r}: expected one of {', '.join(REDUCTIONS)}")
    if target.shape != input.shape:
        raise ValueError(f"target has shape {tuple(target.shape)}; it must be the input's, {tuple(input.shape)}")
    if not input.is_floating_point():
        raise ValueError(f"input is {input.dtype}; the fused loss takes floating-point logits")
    for name, t in (("weight", weight), ("pos_weight", pos_weight)):
        if t is not None and not _broadcasts_to(t.shape, input.shape):
            raise ValueError(f"{name} has shape {tuple(t.shape)}, which does not broadcast to the input's, "
                             f"{tuple(input.shape)}")  # fmt: skip


def _broadcasts_to(shape: torch.Size, to: torch.Size) -> bool:
    """``shape`` stretches to ``to`` (NumPy's rule; no more dims than ``to``). On the shapes alone: the
    general ``torch.broadcast_shapes`` costs tens of microseconds per call."""
    if len(shape) > len(to):
        return False
    return all(a in (1, b) for a, b in zip(reversed(shape), reversed(to), strict=False))


def bce_with_logits_fused(
    input: Tensor, target: Tensor, weight: Tensor | None, pos_weight: Tensor | None, reduction: str
) -> tuple[Tensor, Tensor]:
    """CPU: (loss, grad at grad_output 1) in the input's dtype, computed as PyTorch's own CPU loss computes
    (each ATen call in the dtype, float16 and bfloat16 widened inside each call). Few ATen calls, in place
    wherever they can be: fresh input-sized temporaries and out-of-place broadcasting cost more than the
    arithmetic on a CPU."""
    _check(input, target, weight, pos_weight, reduction)
    x, y, w, pw = input, target, weight, pos_weight
    # softplus(x) = -log sigmoid(-x) (one pass, no buffer); per element, with py = pw y, lw = 1 + py - y:
    #   loss = lw softplus(x) - py x      (= (1 - y) x + lw softplus(-x), PyTorch's)
    #   grad = lw sigmoid(x) - py         (PyTorch's backward)
    loss = F.softplus(x)
    grad = torch.sigmoid(x)
    scale = 1.0 / x.numel() if reduction == "mean" and x.numel() else 1.0
    if pw is None:
        grad.sub_(y)
        loss.addcmul_(x, y, value=-1)
    else:
        # in place wherever pw broadcasts: ATen's out-of-place broadcasting ops are several times slower here
        py = y.clone().mul_(pw)
        lw = torch.sub(py, y).add_(1)
        loss.mul_(lw).addcmul_(x, py, value=-1)
        grad = py.addcmul_(lw, grad, value=-1)  # py - lw sigmoid(x): its sign goes with the scale below
        scale = -scale
        del lw
    if w is not None:
        loss.mul_(w)
        grad.mul_(w if scale == 1.0 else torch.mul(w, scale))  # the 1/N (and sign) folded into the small weight
    elif scale != 1.0:
        grad.mul_(scale)
    if reduction == "sum":
        loss = loss.sum()
    elif reduction == "mean":
        loss = loss.mean()
    return loss, grad


_LIB.impl("bce_with_logits_fused", bce_with_logits_fused, "CPU")


@torch.library.register_fake(FUSED_OP_NAME, lib=_LIB)
def _bce_with_logits_fused_fake(
    input: Tensor, target: Tensor, weight: Tensor | None, pos_weight: Tensor | None, reduction: str
) -> tuple[Tensor, Tensor]:
    _check(input, target, weight, pos_weight, reduction)
    loss = input.new_empty(input.shape if reduction == "none" else ())
    return loss, input.new_empty(input.shape)
