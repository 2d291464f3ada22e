"""The BCE losses whose backward runs the operator: PyTorch's arguments and forward (so the shapes they
accept are exactly PyTorch's), the backward ``bcetune::bce_grad`` (wrt the logit, on the sigmoid saved in
forward; wrt the probability), PyTorch's own where the kernel cannot run the case (``fallback``)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn import _reduction

from kernel.torch_op.calls import dtype_name
from kernel.torch_op.fallback import fallback, why_not_kernel
from kernel.torch_op.npu_device import load_npu, npu_soc
from kernel.torch_op.tilings import OpTiling, cpu_soc, resolved, tables_dir


class _WithLogits(torch.autograd.Function):
    """PyTorch's forward; the backward is the operator wrt the logit, on the sigmoid saved here."""

    @staticmethod
    def forward(
        ctx: Any, input: Tensor, target: Tensor, weight: Tensor | None, pos_weight: Tensor | None, reduction: str
    ) -> Tensor:
        loss = F.binary_cross_entropy_with_logits(input, target, weight, reduction=reduction, pos_weight=pos_weight)
        ctx.save_for_backward(input, torch.sigmoid(input), target, weight, pos_weight)
        ctx.reduction = reduction
        return loss

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, None, None, None, None]:
        input, p, target, weight, pos_weight = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph: differentiate PyTorch's formula instead
            fallback("double backward (create_graph=True) is PyTorch's: the kernel is first order")
            with torch.enable_grad():  # on the saved input itself: the result stays in the caller's graph
                loss = F.binary_cross_entropy_with_logits(
                    input, target, weight, reduction=ctx.reduction, pos_weight=pos_weight
                )
                (dx,) = torch.autograd.grad(loss, input, grad, create_graph=True)
            return dx, None, None, None, None
        g = grad.contiguous() if ctx.reduction == "none" else grad.reshape(())
        dx = torch.ops.bcetune.bce_grad(g, p, target.contiguous(), weight, pos_weight, ctx.reduction, "logit")
        return dx, None, None, None, None


class _Probability(torch.autograd.Function):
    """PyTorch's forward; the backward is the operator wrt the probability."""

    @staticmethod
    def forward(ctx: Any, input: Tensor, target: Tensor, weight: Tensor | None, reduction: str) -> Tensor:
        loss = F.binary_cross_entropy(input, target, weight, reduction=reduction)
        ctx.save_for_backward(input, target, weight)
        ctx.reduction = reduction
        return loss

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, None, None, None]:
        input, target, weight = ctx.saved_tensors
        if torch.is_grad_enabled():
            fallback("double backward (create_graph=True) is PyTorch's: the kernel is first order")
            with torch.enable_grad():
                loss = F.binary_cross_entropy(input, target, weight, reduction=ctx.reduction)
                (dx,) = torch.autograd.grad(loss, input, grad, create_graph=True)
            return dx, None, None, None
        g = grad.contiguous() if ctx.reduction == "none" else grad.reshape(())
        dx = torch.ops.bcetune.bce_grad(
            g, input.contiguous(), target.contiguous(), weight, None, ctx.reduction, "probability"
        )
        return dx, None, None, None


def _reduction_of(size_average: bool | None, reduce: bool | None, reduction: str) -> str:
    if size_average is not None or reduce is not None:
        return _reduction.legacy_get_string(size_average, reduce)
    return reduction


def binary_cross_entropy_with_logits(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
    pos_weight: Tensor | None = None,
) -> Tensor:
    """``torch.nn.functional.binary_cross_entropy_with_logits`` whose backward runs the bcetune kernel."""
    reduction = _reduction_of(size_average, reduce, reduction)
    why = why_not_kernel(input, target, weight, pos_weight, "logit") if input.requires_grad else "no grad"
    if why is not None:
        loss = F.binary_cross_entropy_with_logits(input, target, weight, reduction=reduction, pos_weight=pos_weight)
        if why != "no grad":
            fallback(why)  # after PyTorch accepted the call: its own errors come first
        return loss
    return _WithLogits.apply(input, target, weight, pos_weight, reduction)


def binary_cross_entropy(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    """``torch.nn.functional.binary_cross_entropy`` whose backward runs the bcetune kernel."""
    reduction = _reduction_of(size_average, reduce, reduction)
    why = why_not_kernel(input, target, weight, None, "probability") if input.requires_grad else "no grad"
    if why is not None:
        loss = F.binary_cross_entropy(input, target, weight, reduction=reduction)
        if why != "no grad":
            fallback(why)
        return loss
    return _Probability.apply(input, target, weight, reduction)


class BCEWithLogitsLoss(torch.nn.BCEWithLogitsLoss):
    """``torch.nn.BCEWithLogitsLoss`` (same arguments, buffers and state dict) whose backward runs the
    bcetune kernel."""

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return binary_cross_entropy_with_logits(
            input, target, self.weight, pos_weight=self.pos_weight, reduction=self.reduction
        )


class BCELoss(torch.nn.BCELoss):
    """``torch.nn.BCELoss`` (same arguments) whose backward runs the bcetune kernel."""

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return binary_cross_entropy(input, target, self.weight, reduction=self.reduction)


def explain(
    input: Tensor,
    target: Tensor | None = None,
    weight: Tensor | None = None,
    pos_weight: Tensor | None = None,
    reduction: str = "mean",
    wrt: str = "logit",
) -> OpTiling:
    """The tiling the backward of this loss call runs (the operator's for the same operands): on the
    CPU the twin's SoC, on an NPU the device's. BadRequest where the kernel cannot run it."""
    shape = tuple(input.shape)
    grad_shape = shape if reduction == "none" else ()
    shapes = (
        grad_shape,
        shape,
        shape if target is None else tuple(target.shape),
        None if weight is None else tuple(weight.shape),
        None if pos_weight is None else tuple(pos_weight.shape),
    )
    dtype = dtype_name(input.dtype)
    dtypes = (dtype, dtype, dtype if target is None else dtype_name(target.dtype)) + tuple(
        "" if t is None else dtype_name(t.dtype) for t in (weight, pos_weight)
    )
    if input.device.type == "cpu":
        soc = cpu_soc()
    else:
        load_npu()
        soc = npu_soc(input.device.index or 0)
    return resolved(soc, tables_dir(), shapes, dtypes, reduction, wrt)
