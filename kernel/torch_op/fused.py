"""The operator ``bcetune::bce_with_logits_fused``: BCEWithLogits's loss and its gradient wrt the logits in
one call, so the loss keeps only the gradient for backward (PyTorch's own keeps the logits and the target,
and its backward reads them again).

Per element, with ``lw = 1 + (pw - 1) * y`` (``pw`` the pos_weight, 1 without one) and ``scale`` 1/N for
mean (else 1), in a form that neither overflows nor loses the small side:

    loss = w * ((1 - y) * x - lw * logsigmoid(x))                summed (times scale) for sum and mean
    grad = w * scale * ((1 - y) * sigmoid(x) - pw * y * sigmoid(-x))    d loss / d x at grad_output 1

float16 and bfloat16 compute in float32 and round once at the end. Implementations: CPU, composed of
ATen's vectorised kernels (one ``logsigmoid`` of the logits, the sigmoids as its exponentials, in-place
arithmetic: on the CPU the loss is never slower than PyTorch's forward plus backward, ``make bench-loss``);
fake, for ``torch.compile``. The
Ascend C kernel has no fused mode yet: on an NPU the losses run PyTorch's forward and the bce_grad kernel's
backward (``kernel.torch_op.losses``).
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
    try:
        return torch.broadcast_shapes(shape, to) == to
    except RuntimeError:
        return False


def _wide(t: Tensor | None) -> Tensor | None:
    """float16 / bfloat16 computed in float32 (the kernel's rule); float32 and float64 as they are."""
    if t is None or t.dtype in (torch.float32, torch.float64):
        return t
    return t.float()


def bce_with_logits_fused(
    input: Tensor, target: Tensor, weight: Tensor | None, pos_weight: Tensor | None, reduction: str
) -> tuple[Tensor, Tensor]:
    """CPU: (loss, grad at grad_output 1), each in the input's dtype."""
    _check(input, target, weight, pos_weight, reduction)
    x, y, w, pw = _wide(input), _wide(target), _wide(weight), _wide(pos_weight)
    assert x is not None and y is not None
    n = x.numel()
    scale = 1.0 / n if reduction == "mean" and n else 1.0
    log_p = F.logsigmoid(x)  # log sigmoid(x), without overflow
    # d loss / d x = w ((1 - y) sigmoid(x) - pw y sigmoid(-x)): the two sides apart, so a hard label's
    # gradient keeps its relative accuracy where sigmoid(x) is near 1 (sigmoid(x) * lw - pw y would round
    # it away); sigmoid(-x) = exp(log sigmoid(x) - x), accurate on both sides of 0
    grad = log_p.exp()
    grad.addcmul_(grad, y, value=-1)  # (1 - y) sigmoid(x)
    q = log_p.sub(x).exp_().mul_(y)  # y sigmoid(-x)
    if pw is None:
        grad.sub_(q)
    else:
        grad.addcmul_(q, pw, value=-1)
    del q
    # the loss: (1 - y) x - lw log sigmoid(x), lw = 1 + (pw - 1) y (PyTorch's form)
    if pw is not None:
        log_p.mul_(torch.addcmul(torch.ones((), dtype=x.dtype), pw - 1, y))
    loss = torch.addcmul(x, x, y, value=-1).sub_(log_p)
    del log_p
    if w is not None:
        loss.mul_(w)
        grad.mul_(w * scale if scale != 1.0 else w)  # the 1/N folded into the (small) weight
    elif scale != 1.0:
        grad.mul_(scale)
    if reduction != "none":
        loss = loss.sum() * scale
    if grad.shape != input.shape:  # a weight wider than the input is PyTorch's error, raised above
        grad = grad.expand(input.shape).contiguous()
    return loss.to(input.dtype), grad.to(input.dtype)


_LIB.impl("bce_with_logits_fused", bce_with_logits_fused, "CPU")


@torch.library.register_fake(FUSED_OP_NAME, lib=_LIB)
def _bce_with_logits_fused_fake(
    input: Tensor, target: Tensor, weight: Tensor | None, pos_weight: Tensor | None, reduction: str
) -> tuple[Tensor, Tensor]:
    _check(input, target, weight, pos_weight, reduction)
    loss = input.new_empty(input.shape if reduction == "none" else ())
    return loss, input.new_empty(input.shape)
