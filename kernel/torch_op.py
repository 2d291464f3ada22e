"""The kernel as a PyTorch operator, and the BCE losses whose backward runs it.

``torch.ops.bcetune.bce_grad(grad, p, y, weight, pos_weight, reduction, wrt)`` is z, the gradient with
``p``'s shape (``p`` the probability: the sigmoid of the logits for ``wrt="logit"``; ``reduction`` and
``wrt`` spelled as the service spells them). It has three implementations:

- CPU: the kernel source in the CPU twin (``kernel.cpu``), so a laptop runs what the NPU runs;
- NPU (``PrivateUse1``): the launch extension (``kernel/npu_ext``), registered when it loads. Its
  tilings live in a bounded device-buffer cache: a hit launches without any host-to-device copy
  (NPU graph capture friendly once each shape has run once); a miss calls back here for the tiling.
  NOT RUN on bcetune's CI (no NPU): compiled against the real torch_npu headers there, run by
  ``python -m tuner doctor`` on an Ascend host;
- fake: shapes and dtypes only, so the op traces under ``torch.compile`` without running.

Every tiling comes from the resolver the service uses (``tiling_model.resolve``: the shipped tables,
the re-fit between their sizes, the model where none applies; ``$BCETUNE_TABLES`` for your own
tables), once per (SoC, tables, shapes, dtypes, reduction, wrt) in a bounded LRU cache. The CPU twin
emulates ``$BCETUNE_SOC`` (default Ascend910B2).

``binary_cross_entropy_with_logits`` / ``binary_cross_entropy`` and the ``BCEWithLogitsLoss`` /
``BCELoss`` modules take PyTorch's arguments; the forward is PyTorch's own (so the shapes it accepts
are exactly PyTorch's), the backward is the operator (wrt the logit, with the sigmoid saved in forward;
wrt the probability). Where the kernel cannot run a case (float64, a target or weight that needs its
own gradient, a weight form the kernel does not read, a device without the kernel, double backward)
they use PyTorch's backward and say so once per reason with a :class:`FallbackWarning`.
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn import _reduction

from kernel import cpu as twin
from kernel.sources import kernel_source_hash
from tiling_model import BadRequest, TilingData, Variant, known_socs
from tiling_model.dtypes import DTYPES, FLOAT_DTYPES, REDUCTIONS
from tiling_model.resolve import TABLES_ENV, Request, Resolver, load_tables, shipped_tables_dir
from tiling_model.variant import WRT_FORMS, broadcast_of, pos_weight_of

OP_NAME = "bcetune::bce_grad"
SCHEMA = "(Tensor grad, Tensor p, Tensor y, Tensor? weight, Tensor? pos_weight, str reduction, str wrt) -> Tensor"
#: The SoC whose tilings the CPU twin runs (the twin emulates its UB and core count).
SOC_ENV = "BCETUNE_SOC"
DEFAULT_CPU_SOC = "Ascend910B2"
#: Tilings kept per process (host side; the NPU extension keeps as many device buffers).
CACHE_SIZE = 1024
#: torch dtype -> the kernel's dtype name (the service's spelling).
DTYPE_NAMES: dict[torch.dtype, str] = {
    torch.float32: "float32",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
    torch.int32: "int32",
    torch.int16: "int16",
}
#: The kernel's names of the operands (grad, p, y, weight, pos_weight) at its GM boundary.
_GM_NAMES = ("grad", "logits", "labels", "weight", "pos_weight")
_DEFAULT_TABLES = str(shipped_tables_dir()) if not os.environ.get(TABLES_ENV) else None

Shape = tuple[int, ...]
#: (grad, p, y, weight, pos_weight) shapes; None for an absent operand.
Shapes = tuple[Shape, Shape, Shape, Shape | None, Shape | None]


class FallbackWarning(UserWarning):
    """A bcetune loss used PyTorch's own backward because the kernel cannot run this case."""


# --- what a call computes -------------------------------------------------------------------------


def _dtype_name(dtype: torch.dtype) -> str:
    return DTYPE_NAMES.get(dtype) or str(dtype).removeprefix("torch.")


def call_variant(shapes: Shapes, dtypes: tuple[str, ...], reduction: str, wrt: str) -> tuple[Variant, int]:
    """The kernel variant and weight period of a call, from its operands' shapes and dtype names
    (grad, p, y, weight, pos_weight; absent ones None). BadRequest (a ValueError) names what is wrong;
    it runs on shapes only, so the fake implementation checks exactly what the real ones check."""
    if reduction not in REDUCTIONS:
        raise BadRequest(f"reduction={reduction!r}; one of {', '.join(REDUCTIONS)}")
    if wrt not in WRT_FORMS:
        raise BadRequest(f"wrt={wrt!r}; one of {', '.join(WRT_FORMS)}")
    g_shape, shape, y_shape, w_shape, pw_shape = shapes
    dtype = dtypes[1]
    if dtype not in DTYPES:
        raise BadRequest(f"p is {dtype}; the kernel takes {', '.join(DTYPES)}")
    names = ("grad", "p", "y", "weight", "pos_weight")
    for name, other in zip(names, dtypes, strict=True):
        if other not in (dtype, ""):
            raise BadRequest(f"{name} is {other} but p is {dtype}: all operands share one dtype")
    if y_shape != shape:
        raise BadRequest(f"y has shape {list(y_shape)} but p has {list(shape)}")
    if reduction == "none" and g_shape != shape:
        raise BadRequest(f"reduction='none' takes grad of p's shape {list(shape)}, got {list(g_shape)}")
    if reduction != "none" and _numel(g_shape) != 1:
        raise BadRequest(f"reduction={reduction!r} takes one scalar grad, got shape {list(g_shape)}")
    w = broadcast_of("weight", w_shape, shape)
    pw = pos_weight_of(pw_shape, shape)
    return Variant(dtype, reduction, w.form, pw.form, wrt), w.period  # type: ignore[arg-type]


def _numel(shape: Shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _operands(*tensors: Tensor | None) -> tuple[Shapes, tuple[str, ...]]:
    shapes = tuple(None if t is None else tuple(t.shape) for t in tensors)
    dtypes = tuple("" if t is None else _dtype_name(t.dtype) for t in tensors)
    return shapes, dtypes  # type: ignore[return-value]


# --- tilings --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OpTiling:
    """The tiling the operator runs for one kind of call, and where it came from."""

    soc: str
    source: str  # "exact" (tuned at this size), "bucket" (re-fitted in a tuned size's bucket) or "model"
    tiling: TilingData
    provenance: dict[str, Any]
    prepared: twin.PreparedTiling = field(repr=False, compare=False)

    def __str__(self) -> str:
        t = self.tiling
        p = t.params
        return (
            f"{self.soc} {t.variant.label()} n={t.n}: {self.source} tiling, {t.block_dim} cores, "
            f"block {p.block_bytes} B, tile {p.tile_bytes} B, BUFFER_NUM {p.buffer_num} "
            + (
                f"(from the {self.soc} table, swept on the {self.provenance.get('backend')} backend)"
                if self.provenance.get("schema_version") is not None
                else "(no table applies: the model's best)"
            )
        )


def tables_dir() -> str:
    """The tables the operator reads: $BCETUNE_TABLES, else the shipped ones."""
    return os.environ.get(TABLES_ENV) or _DEFAULT_TABLES or str(shipped_tables_dir())


def cpu_soc() -> str:
    """The SoC whose tilings the CPU twin runs: $BCETUNE_SOC, else Ascend910B2."""
    return _known_soc(os.environ.get(SOC_ENV) or DEFAULT_CPU_SOC)


@functools.lru_cache(maxsize=16)
def _known_soc(soc: str) -> str:
    if soc not in known_socs():
        raise BadRequest(f"${SOC_ENV}={soc!r} is not a known SoC ({', '.join(known_socs())})")
    return soc


@functools.lru_cache(maxsize=8)
def _resolver(tables: str) -> Resolver:
    return Resolver(load_tables(Path(tables)), kernel_source_hash())


@functools.lru_cache(maxsize=CACHE_SIZE)
def resolved(soc: str, tables: str, shapes: Shapes, dtypes: tuple[str, ...], reduction: str, wrt: str) -> OpTiling:
    """The tiling for one kind of call (checked by ``call_variant``), resolved once and kept: the key is
    everything the tiling depends on."""
    variant, period = call_variant(shapes, dtypes, reduction, wrt)
    r = _resolver(tables).resolve(Request(soc, shapes[1], variant, weight_period=period))
    return OpTiling(soc, r.source, r.tiling, r.provenance, twin.PreparedTiling.of(r.tiling))


def reload_tables() -> None:
    """Forget the loaded tables and every cached tiling (after editing a tables directory in place);
    the NPU extension's device buffers too."""
    resolved.cache_clear()
    _resolver.cache_clear()
    if _npu.ext is not None:
        _npu.ext.clear_tilings()


def cache_info() -> functools._CacheInfo:
    """Hits, misses and size of the host tiling cache."""
    return resolved.cache_info()


# --- the operator ---------------------------------------------------------------------------------


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
    shapes, dtypes = _operands(*tensors)
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
    shapes, dtypes = _operands(grad, p, y, weight, pos_weight)
    call_variant(shapes, dtypes, reduction, wrt)
    return p.new_empty(p.shape)


# --- the NPU implementation (NOT RUN here: no NPU on bcetune's CI) ----------------------------------


class _NpuState:
    """The launch extension once loaded (its PrivateUse1 kernel registers with the dispatcher as it
    loads), or why it could not be."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.tried = False
        self.ext: Any = None
        self.error: str | None = None
        self.socs: dict[int, str] = {}


_npu = _NpuState()


def _npu_soc(device: int) -> str:
    soc = _npu.socs.get(device)
    if soc is None:
        soc = _npu.socs[device] = str(torch.npu.get_device_name(device))  # type: ignore[attr-defined]
    return soc


def _npu_tiling(device: int, shapes: list[Any], dtypes: list[str], reduction: str, wrt: str) -> tuple[bytes, int, int]:
    """The extension's callback on a device-buffer miss: (struct bytes, block_dim, workspace bytes)."""
    key = tuple(None if s is None else tuple(int(d) for d in s) for s in shapes)
    op = resolved(_npu_soc(device), tables_dir(), key, tuple(dtypes), reduction, wrt)
    return op.tiling.to_bytes(), op.tiling.block_dim, op.tiling.workspace_bytes


def load_npu() -> Any:
    """The launch extension with the NPU kernel registered and its tiling callback set; NpuUnavailable
    (a BuildError) saying what is missing. Tried once per process."""
    with _npu.lock:
        if not _npu.tried:
            _npu.tried = True
            from kernel import npu

            try:
                ext = npu.runtime().ext
                ext.set_resolver(_npu_tiling)
                ext.set_capacity(CACHE_SIZE)
                _npu.ext = ext
            except npu.NpuUnavailable as e:
                _npu.error = str(e)
        if _npu.ext is None:
            from kernel.npu import NpuUnavailable

            raise NpuUnavailable(_npu.error or "the NPU extension is not loaded")
        return _npu.ext


if "torch_npu" in sys.modules:  # an NPU user: make the op's NPU kernel available as soon as we load
    try:
        load_npu()
    except Exception:  # noqa: BLE001  (the reason is kept and given where the op is used)
        pass


# --- the losses -----------------------------------------------------------------------------------

_warned: set[str] = set()
_cpu_compiler = shutil.which(os.environ.get("CXX", "g++")) is not None


def _fallback(reason: str) -> None:
    if reason not in _warned:
        _warned.add(reason)
        warnings.warn(f"bcetune: {reason}; using PyTorch's own backward", FallbackWarning, stacklevel=4)


def why_not_kernel(
    input: Tensor, target: Tensor, weight: Tensor | None, pos_weight: Tensor | None, wrt: str
) -> str | None:
    """Why the kernel cannot compute this loss's input gradient, or None when it can."""
    dtype = _dtype_name(input.dtype)
    if dtype not in FLOAT_DTYPES:
        return f"input is {dtype}; the kernel computes float32, float16 and bfloat16 losses"
    for name, t in (("target", target), ("weight", weight), ("pos_weight", pos_weight)):
        if t is None:
            continue
        if t.requires_grad:
            return f"{name} requires grad; the kernel computes the input's gradient only"
        if t.dtype != input.dtype:
            return f"{name} is {_dtype_name(t.dtype)} but input is {dtype}; the kernel takes one dtype"
        if t.device != input.device:
            return f"{name} is on {t.device} but input is on {input.device}"
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
    shape = tuple(input.shape)
    try:
        broadcast_of("weight", None if weight is None else tuple(weight.shape), shape)
        pos_weight_of(None if pos_weight is None else tuple(pos_weight.shape), shape)
    except BadRequest as e:
        return str(e)
    return None


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
            _fallback("double backward (create_graph=True) is PyTorch's: the kernel is first order")
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
            _fallback("double backward (create_graph=True) is PyTorch's: the kernel is first order")
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
            _fallback(why)  # after PyTorch accepted the call: its own errors come first
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
            _fallback(why)
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
    dtype = _dtype_name(input.dtype)
    dtypes = (dtype, dtype, dtype if target is None else _dtype_name(target.dtype)) + tuple(
        "" if t is None else _dtype_name(t.dtype) for t in (weight, pos_weight)
    )
    if input.device.type == "cpu":
        soc = cpu_soc()
    else:
        load_npu()
        soc = _npu_soc(input.device.index or 0)
    return resolved(soc, tables_dir(), shapes, dtypes, reduction, wrt)


__all__ = [
    "BCELoss",
    "BCEWithLogitsLoss",
    "FallbackWarning",
    "OpTiling",
    "binary_cross_entropy",
    "binary_cross_entropy_with_logits",
    "bce_grad",
    "cache_info",
    "call_variant",
    "explain",
    "load_npu",
    "reload_tables",
    "resolved",
    "why_not_kernel",
]
