"""The operator ``bcetune::bce_with_logits_fused``: BCEWithLogits's loss and its gradient wrt the logits in
one call, so the loss keeps only the gradient for backward (PyTorch's own keeps the logits and the target,
and its backward reads them again).

Per element, with ``lw = 1 + (pw - 1) * y`` (``pw`` the pos_weight, 1 without one) and ``scale`` 1/N for
mean (else 1), in a form that neither overflows nor loses the small side:

    loss = w * (lw * softplus(x) - pw * y * x)      summed (times scale) for sum and mean
    grad = w * scale * (lw * sigmoid(x) - pw * y)    d loss / d x at grad_output 1

(the loss is PyTorch's ``(1 - y) x + lw softplus(-x)`` rearranged so it takes one pass over x).

Implementations: CPU, one pass of the native CPU kernel (``kernel.torch_op.native``: built on first use;
float16 and bfloat16 computed in float32), else ATen calls in the input's dtype as PyTorch's own CPU loss
makes them (``softplus`` and ``sigmoid`` of the logits, then in-place arithmetic); ``make bench-loss`` times
it against PyTorch's forward plus backward; fake, for ``torch.compile``; ``PrivateUse1`` (an Ascend NPU):
the launch extension's, one launch of the Ascend C kernel's fused mode
(``kernel/op_kernel/bce_with_logits_fused.cpp``; NOT RUN here: no NPU), whose numerics the CPU twin runs
(``twin_fused`` here; ``kernel.cpu.bce_with_logits_fused`` on numpy arrays).
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from torch import Tensor

from kernel import cpu as twin
from kernel.torch_op import native
from kernel.torch_op.calls import operands
from kernel.torch_op.op import _LIB, _as_numpy
from kernel.torch_op.tilings import cpu_soc, resolved, tables_dir

#: What the losses run on the CPU: ``fast`` (the fused call, else PyTorch's own) or ``twin`` (the kernel).
CPU_LOSS_ENV = "BCETUNE_CPU_LOSS"
CPU_LOSSES = ("fast", "twin")
FUSED_OP_NAME = "bcetune::bce_with_logits_fused"
FUSED_SCHEMA = "(Tensor input, Tensor target, Tensor? weight, Tensor? pos_weight, str reduction) -> (Tensor, Tensor)"
REDUCTIONS = ("none", "sum", "mean")

_LIB.define("bce_with_logits_fused" + FUSED_SCHEMA)


#: Where ``os.environ`` keeps its values (posix: bytes to bytes, updated by every ``os.environ`` write): read
#: directly, a lookup costs ~0.1 us where ``os.environ.get`` (key encoding, value decoding) costs ~1 us, and the
#: loss reads it at every call (below the crossover a step is PyTorch's own, ~60 us).
_ENVIRON = getattr(os.environ, "_data", None) if os.name == "posix" else None
_ENV_KEY = os.fsencode(CPU_LOSS_ENV)


def cpu_loss() -> str:
    """``$BCETUNE_CPU_LOSS``, read at every call (``fast`` when unset)."""
    if _ENVIRON is not None:
        raw = _ENVIRON.get(_ENV_KEY)
        if not raw:
            return "fast"
        chosen = os.fsdecode(raw)
    else:
        chosen = os.environ.get(CPU_LOSS_ENV) or "fast"
    if chosen not in CPU_LOSSES:
        raise ValueError(f"${CPU_LOSS_ENV}={chosen!r}: expected one of {', '.join(CPU_LOSSES)}")
    return chosen


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
    """CPU: (loss, grad at grad_output 1) in the input's dtype: the native kernel's one pass where it is
    built and the operands are its dtypes, else ``aten_fused``; with ``$BCETUNE_CPU_LOSS=twin`` the Ascend C
    kernel's fused mode in the CPU twin (``twin_fused``)."""
    if cpu_loss() == "twin":
        return twin_fused(input, target, weight, pos_weight, reduction)
    _check(input, target, weight, pos_weight, reduction)
    if native.load() and _native_dtypes(input, target, weight, pos_weight):
        return torch.ops.bcetune.bce_with_logits_fused_cpu(input, target, weight, pos_weight, reduction)
    return aten_fused(input, target, weight, pos_weight, reduction)


_NATIVE_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _native_dtypes(input: Tensor, target: Tensor, weight: Tensor | None, pos_weight: Tensor | None) -> bool:
    return input.dtype in _NATIVE_DTYPES and all(t is None or t.dtype == input.dtype
                                                 for t in (target, weight, pos_weight))  # fmt: skip


def aten_fused(
    input: Tensor, target: Tensor, weight: Tensor | None, pos_weight: Tensor | None, reduction: str
) -> tuple[Tensor, Tensor]:
    """(loss, grad at grad_output 1) in ATen calls, each in the input's dtype as PyTorch's own CPU loss
    computes (float16 and bfloat16 widened inside each call). Few calls, in place wherever they can be:
    fresh input-sized temporaries and out-of-place broadcasting cost more than the arithmetic on a CPU."""
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


def twin_fused(
    input: Tensor, target: Tensor, weight: Tensor | None, pos_weight: Tensor | None, reduction: str
) -> tuple[Tensor, Tensor]:
    """(loss, grad at grad_output 1) from the kernel's fused mode (``bce_with_logits_fused.cpp``) in the CPU
    twin, with the fused tiling the service resolves for ``cpu_soc()``: the NPU's numerics, for checking
    (``$BCETUNE_CPU_LOSS=twin``). Sum and mean add the cores' float32 partial sums in block order."""
    _check(input, target, weight, pos_weight, reduction)
    shapes, dtypes = operands(None, input, target, weight, pos_weight)
    op = resolved(cpu_soc(), tables_dir(), shapes, dtypes, reduction, "logit", "fused")
    none = reduction == "none"
    dx = torch.zeros(input.shape, dtype=input.dtype)
    loss = torch.zeros(input.shape if none else (max(op.tiling.block_dim, 1),),
                       dtype=input.dtype if none else torch.float32)  # fmt: skip
    if op.tiling.block_dim:
        operands_ = (input, target, weight, pos_weight)
        arrays = {name: None if t is None else _as_numpy(t)
                  for name, t in zip(twin.FUSED_TENSOR_NAMES, operands_, strict=False)}  # fmt: skip
        twin.run_fused_tiling(op.prepared, arrays, _as_numpy(dx), _as_numpy(loss))
    if none:
        return loss, dx
    total = 0.0
    for part in loss.tolist():  # in block order: the same sum run to run
        total += part
    if reduction == "mean":
        total = total / input.numel() if input.numel() else float("nan")
    return torch.tensor(total, dtype=input.dtype), dx


@torch.library.register_fake(FUSED_OP_NAME, lib=_LIB)
def _bce_with_logits_fused_fake(
    input: Tensor, target: Tensor, weight: Tensor | None, pos_weight: Tensor | None, reduction: str
) -> tuple[Tensor, Tensor]:
    _check(input, target, weight, pos_weight, reduction)
    loss = input.new_empty(input.shape if reduction == "none" else ())
    return loss, input.new_empty(input.shape)
