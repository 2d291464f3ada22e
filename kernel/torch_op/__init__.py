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

One concern per module: ``calls`` (what a call computes, from shapes), ``tilings`` (the resolved, cached
tilings), ``op`` (the schema, the CPU and fake implementations), ``npu_device`` (the NPU one),
``fallback`` (when the kernel cannot run a case), ``losses`` (the autograd functions, functional forms,
modules and ``explain``).
"""

from kernel.torch_op.calls import DTYPE_NAMES, Shape, Shapes, call_variant
from kernel.torch_op.fallback import FallbackWarning, why_not_kernel
from kernel.torch_op.losses import (
    BCELoss,
    BCEWithLogitsLoss,
    binary_cross_entropy,
    binary_cross_entropy_with_logits,
    explain,
)
from kernel.torch_op.npu_device import load_npu
from kernel.torch_op.op import OP_NAME, SCHEMA, bce_grad
from kernel.torch_op.tilings import (
    CACHE_SIZE,
    DEFAULT_CPU_SOC,
    SOC_ENV,
    OpTiling,
    cache_info,
    cpu_soc,
    reload_tables,
    resolved,
    tables_dir,
)

__all__ = [
    "CACHE_SIZE",
    "DEFAULT_CPU_SOC",
    "DTYPE_NAMES",
    "OP_NAME",
    "SCHEMA",
    "SOC_ENV",
    "BCELoss",
    "BCEWithLogitsLoss",
    "FallbackWarning",
    "OpTiling",
    "Shape",
    "Shapes",
    "bce_grad",
    "binary_cross_entropy",
    "binary_cross_entropy_with_logits",
    "cache_info",
    "call_variant",
    "cpu_soc",
    "explain",
    "load_npu",
    "reload_tables",
    "resolved",
    "tables_dir",
    "why_not_kernel",
]
