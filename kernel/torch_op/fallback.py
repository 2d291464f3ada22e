"""When the kernel cannot compute a loss's input gradient, and the warning that says so once per reason
(the loss then uses PyTorch's own backward)."""

from __future__ import annotations

import os
import shutil
import warnings

import torch
from torch import Tensor

from kernel.torch_op.calls import dtype_name
from kernel.torch_op.npu_device import load_npu
from tiling_model import BadRequest
from tiling_model.dtypes import FLOAT_DTYPES
from tiling_model.variant import broadcast_of, pos_weight_of


class FallbackWarning(UserWarning):
    """A bcetune loss used PyTorch's own backward because the kernel cannot run this case."""


_warned: set[str] = set()
_cpu_compiler = shutil.which(os.environ.get("CXX", "g++")) is not None


def fallback(reason: str) -> None:
    if reason not in _warned:
        _warned.add(reason)
        warnings.warn(f"bcetune: {reason}; using PyTorch's own backward", FallbackWarning, stacklevel=4)


def why_not_kernel(
    input: Tensor, target: Tensor, weight: Tensor | None, pos_weight: Tensor | None, wrt: str
) -> str | None:
    """Why the kernel cannot compute this loss's input gradient, or None when it can."""
    why = why_not_operands(input, target, weight, pos_weight)
    if why is not None:
        return why
    device = input.device.type
    if device == "cpu":
        if not _cpu_compiler:
            return "no C++ compiler to build the CPU twin (install g++ or set CXX)"
    elif device in ("npu", "privateuseone"):
        try:
            load_npu()
        except Exception as e:  # noqa: BLE001
            return f"the NPU kernel is not available ({e})"
    else:
        return f"no bcetune kernel for {device} tensors"
    return None


FUSED_DTYPES = tuple(getattr(torch, name) for name in FLOAT_DTYPES)


def why_not_fused(input: Tensor, target: Tensor, weight: Tensor | None, pos_weight: Tensor | None) -> str | None:
    """Why the fused CPU loss cannot take this call (its dtypes and gradients), or None. Cheap: it runs at
    every call of a loss whose step can take tens of microseconds. Shapes PyTorch refuses are PyTorch's to
    refuse (the loss then calls PyTorch's own, which raises its error)."""
    if input.dtype not in FUSED_DTYPES:
        return f"input is {dtype_name(input.dtype)}; the kernel computes float32, float16 and bfloat16 losses"
    for name, t in (("target", target), ("weight", weight), ("pos_weight", pos_weight)):
        if t is None:
            continue
        if t.requires_grad:
            return f"{name} requires grad; the kernel computes the input's gradient only"
        if t.dtype != input.dtype:
            return f"{name} is {dtype_name(t.dtype)} but input is {dtype_name(input.dtype)}; the kernel takes one dtype"
        if t.device != input.device:
            return f"{name} is on {t.device} but input is on {input.device}"
    return None


def why_not_operands(input: Tensor, target: Tensor, weight: Tensor | None, pos_weight: Tensor | None) -> str | None:
    """Why the kernel cannot compute this loss's input gradient on any device (the fused call's rules, a
    device with a kernel, the weight forms the kernel reads), or None."""
    why = why_not_fused(input, target, weight, pos_weight)
    if why is not None:
        return why
    if input.device.type not in ("cpu", "npu", "privateuseone"):
        return f"no bcetune kernel for {input.device.type} tensors"
    shape = tuple(input.shape)
    try:
        broadcast_of("weight", None if weight is None else tuple(weight.shape), shape)
        pos_weight_of(None if pos_weight is None else tuple(pos_weight.shape), shape)
    except BadRequest as e:
        return str(e)
    return None
