"""The operator ``bcetune::bce_grad``: its schema, its CPU implementation (the kernel source in the CPU
twin) and its fake one (shapes and dtypes only, so it traces under ``torch.compile``)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import torch
from torch import Tensor

from kernel import cpu as twin
from kernel.torch_op.calls import call_variant, operands
from kernel.torch_op.tilings import cpu_soc, resolved, tables_dir

OP_NAME = "bcetune::bce_grad"
SCHEMA = "(Tensor grad, Tensor p, Tensor y, Tensor? weight, Tensor? pos_weight, str reduction, str wrt) -> Tensor"
#: The kernel's names of the operands (grad, p, y, weight, pos_weight) at its GM boundary.
_GM_NAMES = ("grad", "logits", "labels", "weight", "pos_weight")


def _as_numpy(t: Tensor) -> np.ndarray:
    """A CPU tensor's memory as numpy, contiguous (no copy when it is; bfloat16 through ml_dtypes)."""
    if t.requires_grad:
        t = t.detach()
    if not t.is_contiguous():
        t = t.contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


#: The operator's library: the define/impl API (a torch.library.custom_op wraps every call in a Python
#: autograd layer: ~15 us per call with this schema against ~4 us here, benchmarks/torch_op_overhead.py).
#: The op is not differentiable itself (it is a gradient): backpropagating through it gets PyTorch's
#: "no autograd kernel" warning; the losses never do (double backward is PyTorch's formula).
_LIB = torch.library.Library("bcetune", "DEF")  # noqa: TOR901
_LIB.define("bce_grad" + SCHEMA)


def bce_grad(
    grad: Tensor,
    p: Tensor,
    y: Tensor,
    weight: Tensor | None,
    pos_weight: Tensor | None,
    reduction: str,
    wrt: str,
) -> Tensor:
    """CPU: the kernel source in the twin with the resolved tiling of ``cpu_soc()``."""
    tensors = (grad, p, y, weight, pos_weight)
    shapes, dtypes = operands(*tensors)
    op = resolved(cpu_soc(), tables_dir(), shapes, dtypes, reduction, wrt)
    z = torch.empty(shapes[1], dtype=p.dtype)
    if op.tiling.block_dim:
        arrays = {name: None if t is None else _as_numpy(t) for name, t in zip(_GM_NAMES, tensors, strict=True)}
        twin.run_tiling(op.prepared, arrays, _as_numpy(z))
    return z


_LIB.impl("bce_grad", bce_grad, "CPU")


@torch.library.register_fake(OP_NAME, lib=_LIB)
def _bce_grad_fake(
    grad: Tensor,
    p: Tensor,
    y: Tensor,
    weight: Tensor | None,
    pos_weight: Tensor | None,
    reduction: str,
    wrt: str,
) -> Tensor:
    shapes, dtypes = operands(grad, p, y, weight, pos_weight)
    call_variant(shapes, dtypes, reduction, wrt)
    return p.new_empty(p.shape)
