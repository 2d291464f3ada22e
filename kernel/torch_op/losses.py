"""The BCE losses bcetune computes: PyTorch's arguments and modules (so the shapes they accept are exactly
PyTorch's), PyTorch's own where bcetune cannot compute a case (``fallback``).

What runs, by device and ``$BCETUNE_CPU_LOSS``:

- **CPU, ``fast`` (the default)**: ``binary_cross_entropy_with_logits`` (when the input needs a gradient) is
  one fused call that keeps only the gradient for backward: ``bcetune::bce_with_logits_fused_loss``, the native
  CPU kernel (one pass: the loss and its gradient) with its autograd node in C++ (``kernel.torch_op.native``),
  at every size; its backward returns the gradient, multiplied only when grad_output is not exactly 1 (read
  from the CPU tensor: no device to synchronise). Without the native build, or under ``torch.compile``: the
  Python Function around ``bcetune::bce_with_logits_fused`` (the ATen composite, or the native kernel when
  traced) from ``FUSED_MIN_ELEMENTS`` on, PyTorch's own below.
  ``binary_cross_entropy`` is PyTorch's own: the kernel's backward in the CPU twin is slower than PyTorch's.
- **CPU, ``twin``**: the NPU's numerics for checking: ``binary_cross_entropy_with_logits`` is the kernel's
  fused mode (``bce_with_logits_fused.cpp``) in the CPU twin, keeping only dx (where the target or a weight
  broadcasts beyond the kernel's forms: PyTorch's forward and ``bcetune::bce_grad`` on the sigmoid saved in
  forward); ``binary_cross_entropy``: PyTorch's forward and ``bcetune::bce_grad`` wrt the probability.
- **NPU**: ``binary_cross_entropy_with_logits`` is one launch of the kernel's fused mode
  (``bce_with_logits_fused``: x and y read once, dx and the loss written) keeping only dx; its backward
  multiplies dx by grad_output out of place (one pass over dx) unless ``$BCETUNE_NPU_GRAD_ONE=sync``, which
  reads a 0-dim grad_output on the host (a device synchronisation per step) and returns dx itself when it is
  exactly 1. Neither has run on an NPU here: which costs less depends on the step (a synchronisation stalls
  the host's run-ahead; the multiply moves 8 bytes per float32 element). ``binary_cross_entropy``: PyTorch's
  forward and the bce_grad kernel's backward.
"""

from __future__ import annotations

import contextlib
import os
import weakref
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn import _reduction
from torch.overrides import has_torch_function_variadic

from kernel.torch_op import native
from kernel.torch_op.calls import dtype_name
from kernel.torch_op.fallback import FUSED_DTYPES, fallback, why_not_fused, why_not_kernel
from kernel.torch_op.fused import CPU_LOSS_ENV, cpu_loss  # (defines bcetune::bce_with_logits_fused)
from kernel.torch_op.npu_device import load_npu, npu_soc
from kernel.torch_op.tilings import OpTiling, cpu_soc, resolved, tables_dir

#: Where the C++ autograd node cannot run (``native.load()`` failed: the ATen composite; or under
#: ``torch.compile``, which traces the Python Function), the fast CPU path is PyTorch's own below this many
#: elements: the Python Function's frames (~25 us a step) outweigh the passes it saves. Measured with the
#: native kernel through the Python Function (2 cores, medians of 201 interleaved steps, float32, none /
#: w[C] pw[C]): 1.06-1.16x PyTorch's step at 1-4 Ki elements, 0.98-1.08x at 16 Ki, 0.72-0.80x at 32 Ki.
FUSED_MIN_ELEMENTS = 1 << 15
#: How the NPU backward decides "grad_output is exactly 1": ``multiply`` (never asks: one pass over dx) or
#: ``sync`` (reads a 0-dim grad_output on the host: a device synchronisation per step).
NPU_GRAD_ONE_ENV = "BCETUNE_NPU_GRAD_ONE"
NPU_GRAD_ONE = ("multiply", "sync")
NPU_DEVICES = ("npu", "privateuseone")


@contextlib.contextmanager
def kernel_on_cpu() -> Iterator[None]:
    """Within it the losses run the kernel on the CPU too (``$BCETUNE_CPU_LOSS=twin``): what the doctor checks."""
    before = os.environ.get(CPU_LOSS_ENV)
    os.environ[CPU_LOSS_ENV] = "twin"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(CPU_LOSS_ENV, None)
        else:
            os.environ[CPU_LOSS_ENV] = before


def _scaled(grad: Tensor, grad_output: Tensor) -> Tensor:
    """The saved gradient times grad_output: the saved tensor itself when grad_output is exactly 1 (the
    common ``loss.backward()``: a 0-dim 1, or a sum's 1 expanded), decided on the host for CPU tensors (and
    NPU ones with ``$BCETUNE_NPU_GRAD_ONE=sync``); otherwise a product (out of place: a graph kept with
    retain_graph=True must find the saved gradient unchanged)."""
    if torch.compiler.is_compiling():
        return grad * grad_output
    host = grad_output.device.type == "cpu"
    if not host and grad_output.device.type in NPU_DEVICES and _npu_grad_one() == "sync":
        host = True  # the caller chose a synchronisation per step over a pass over dx
    if host:
        if grad_output.dim() == 0:
            if grad_output.item() == 1.0:
                return grad
        elif not any(grad_output.stride()) and grad_output.as_strided((), ()).item() == 1.0:  # a sum's 1, expanded
            return grad  # (the 0-dim view of the one element: reshape would copy the expanded tensor)
    return grad * grad_output


def _npu_grad_one() -> str:
    chosen = os.environ.get(NPU_GRAD_ONE_ENV) or "multiply"
    if chosen not in NPU_GRAD_ONE:
        raise ValueError(f"${NPU_GRAD_ONE_ENV}={chosen!r}: expected one of {', '.join(NPU_GRAD_ONE)}")
    return chosen


class _FusedWithLogits(torch.autograd.Function):
    """One fused call in forward, keeping only the gradient; the backward returns it (scaled if need be)."""

    @staticmethod
    def forward(
        ctx: Any, input: Tensor, target: Tensor, weight: Tensor | None, pos_weight: Tensor | None, reduction: str
    ) -> Tensor:
        loss, grad = torch.ops.bcetune.bce_with_logits_fused(input, target, weight, pos_weight, reduction)
        _keep(ctx, grad, reduction, (input, target, weight, pos_weight))
        return loss

    @staticmethod
    def backward(ctx: Any, grad_output: Tensor) -> tuple[Tensor | None, None, None, None, None]:
        (grad,) = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph: differentiate PyTorch's formula instead
            input, target, weight, pos_weight = _alive(ctx.inputs)
            fallback("double backward (create_graph=True) is PyTorch's: the kernel is first order")
            with torch.enable_grad():
                loss = F.binary_cross_entropy_with_logits(
                    input, target, weight, reduction=ctx.reduction, pos_weight=pos_weight
                )
                (dx,) = torch.autograd.grad(loss, input, grad_output, create_graph=True)
            return dx, None, None, None, None
        return _scaled(grad, grad_output), None, None, None, None


def _keep(ctx: Any, grad: Tensor, reduction: str, inputs: tuple[Tensor | None, ...]) -> None:
    """Save only the gradient; the inputs by weak reference (double backward needs them, and finds them
    while the caller holds them)."""
    ctx.save_for_backward(grad)
    ctx.reduction = reduction
    ctx.inputs = None if torch.compiler.is_compiling() else tuple(
        None if t is None else weakref.ref(t) for t in inputs
    )  # fmt: skip


def _alive(refs: tuple[weakref.ref | None, ...] | None) -> tuple[Any, ...]:
    """The fused loss's inputs for a double backward; a clear error where the caller let them go."""
    got = tuple(None if r is None else r() for r in refs) if refs is not None else None
    if got is None or any(r is not None and t is None for r, t in zip(refs or (), got, strict=True)):
        raise RuntimeError(
            "bcetune: double backward (create_graph=True) through binary_cross_entropy_with_logits needs its "
            "input, target and weights, which the fused loss does not keep (it keeps only the gradient) and the "
            "caller no longer holds: keep references to them until the second backward, or call PyTorch's "
            "torch.nn.functional.binary_cross_entropy_with_logits for that loss"
        )
    return got


class _WithLogits(torch.autograd.Function):
    """PyTorch's forward; the backward is the kernel wrt the logit, on the sigmoid saved here (the NPU, the
    CPU twin)."""

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
    """``torch.nn.functional.binary_cross_entropy_with_logits``: on the CPU one fused call keeping only the
    gradient (``$BCETUNE_CPU_LOSS=twin``: the kernel's fused mode in the twin); on an NPU one launch of the
    kernel's fused mode keeping only the gradient."""
    if size_average is not None or reduce is not None:
        reduction = _reduction.legacy_get_string(size_average, reduce)
    if input.is_cpu and cpu_loss() == "fast":
        if not input.requires_grad:  # no gradient to fuse: PyTorch's forward alone
            return _pytorchs_with_logits(input, target, weight, pos_weight, reduction)
        if reduction in _REDUCTION_ENUM and _fused_cpu_takes(input, target, weight, pos_weight):
            op = None if torch.compiler.is_compiling() else native.fused_loss()
            if op is not None:  # the C++ node: at every size
                return op(input, target, weight, pos_weight, reduction)
            if input.numel() < FUSED_MIN_ELEMENTS:  # the Python Function's frames cost more than it saves
                return _pytorchs_with_logits(input, target, weight, pos_weight, reduction)
            return _FusedWithLogits.apply(input, target, weight, pos_weight, reduction)
        if not _fusable_shapes(input, weight, pos_weight, target):  # shapes for PyTorch to refuse or broadcast
            return F.binary_cross_entropy_with_logits(input, target, weight, reduction=reduction, pos_weight=pos_weight)
        why = why_not_fused(input, target, weight, pos_weight)  # a dtype or a gradient the fused call cannot take
    elif not input.requires_grad:
        why = None
    else:
        why = why_not_kernel(input, target, weight, pos_weight, "logit") or ""
        if not why and _fusable_shapes(input, weight, pos_weight, target):  # the kernel's fused mode
            return _FusedWithLogits.apply(input, target, weight, pos_weight, reduction)
        if not why:
            return _WithLogits.apply(input, target, weight, pos_weight, reduction)
    loss = F.binary_cross_entropy_with_logits(input, target, weight, reduction=reduction, pos_weight=pos_weight)
    if why:
        fallback(why)  # after PyTorch accepted the call: its own errors come first
    return loss


def _pytorchs_with_logits(
    input: Tensor, target: Tensor, weight: Tensor | None, pos_weight: Tensor | None, reduction: str
) -> Tensor:
    """PyTorch's own loss, through its ATen binding where ``F.binary_cross_entropy_with_logits`` would only
    check what is checked here (the target's shape; no tensor subclass overriding it): a step below the
    crossover then costs what PyTorch's own costs, not a second Python layer more."""
    if (
        target.shape == input.shape
        and reduction in _REDUCTION_ENUM
        and not has_torch_function_variadic(input, target, weight, pos_weight)
    ):
        return torch.binary_cross_entropy_with_logits(input, target, weight, pos_weight, _REDUCTION_ENUM[reduction])
    return F.binary_cross_entropy_with_logits(input, target, weight, reduction=reduction, pos_weight=pos_weight)


_REDUCTION_ENUM = {name: _reduction.get_enum(name) for name in ("none", "mean", "sum")}


def _fused_cpu_takes(input: Tensor, target: Tensor, weight: Tensor | None, pos_weight: Tensor | None) -> bool:
    """The fused CPU call takes these as they are (``why_not_fused`` and ``_fusable_shapes`` both pass), read in
    the few attribute reads a CPU step can afford (~0.3 us; the full checks name what is wrong)."""
    dtype, shape = input.dtype, input.shape
    if (dtype not in FUSED_DTYPES or target.shape != shape or target.dtype != dtype or target.requires_grad
            or not target.is_cpu):  # fmt: skip
        return False
    for t in (weight, pos_weight):
        if t is not None and (t.dtype != dtype or t.requires_grad or not t.is_cpu or not _stretches(t.shape, shape)):
            return False
    return True


def _stretches(have: torch.Size, shape: torch.Size) -> bool:
    """``have`` broadcasts to ``shape`` without growing it."""
    return len(have) <= len(shape) and all(a in (1, b) for a, b in zip(reversed(have), reversed(shape), strict=False))


def _fusable_shapes(input: Tensor, weight: Tensor | None, pos_weight: Tensor | None, target: Tensor) -> bool:
    """The target has the input's shape and each weight stretches to it (else PyTorch's own decides)."""
    shape = input.shape
    if target.shape != shape:
        return False
    return all(t is None or _stretches(t.shape, shape) for t in (weight, pos_weight))


def binary_cross_entropy(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    """``torch.nn.functional.binary_cross_entropy`` whose backward runs the bcetune kernel (on the CPU only
    with ``$BCETUNE_CPU_LOSS=twin``: by default there it is PyTorch's own, which is faster)."""
    reduction = _reduction_of(size_average, reduce, reduction)
    if input.is_cpu and cpu_loss() == "fast":  # the twin's backward is slower than PyTorch's
        return F.binary_cross_entropy(input, target, weight, reduction=reduction)
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
    mode: str | None = None,
) -> OpTiling:
    """The tiling the kernel runs for this loss call (the operator's for the same operands): on an NPU the
    device's; on the CPU the twin's SoC (what ``$BCETUNE_CPU_LOSS=twin`` runs; the default CPU path runs no
    kernel). ``mode`` None: the kernel mode the loss runs (``fused`` for BCEWithLogits whose target has the
    input's shape, its forward; else ``grad``, the backward). BadRequest where the kernel cannot run it."""
    shape = tuple(input.shape)
    target_shape = shape if target is None else tuple(target.shape)
    if mode is None:
        mode = "fused" if wrt == "logit" and target_shape == shape else "grad"
    grad_shape = None if mode == "fused" else shape if reduction == "none" else ()
    shapes = (
        grad_shape,
        shape,
        target_shape,
        None if weight is None else tuple(weight.shape),
        None if pos_weight is None else tuple(pos_weight.shape),
    )
    dtype = dtype_name(input.dtype)
    dtypes = ("" if mode == "fused" else dtype, dtype, dtype if target is None else dtype_name(target.dtype)) + tuple(
        "" if t is None else dtype_name(t.dtype) for t in (weight, pos_weight)
    )
    if input.device.type == "cpu":
        soc = cpu_soc()
    else:
        load_npu()
        soc = npu_soc(input.device.index or 0)
    return resolved(soc, tables_dir(), shapes, dtypes, reduction, wrt, mode)
