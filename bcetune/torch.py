"""bcetune from PyTorch: BCE losses whose backward runs the tuned BinaryCrossEntropyGrad kernel.

    from bcetune.torch import BCEWithLogitsLoss
    loss_fn = BCEWithLogitsLoss(pos_weight=pos_weight)  # torch.nn.BCEWithLogitsLoss's arguments
    loss_fn(model(x), y).backward()  # the backward is torch.ops.bcetune.bce_grad

On an Ascend NPU (torch_npu imported, the launch extension built: ``python -m tuner doctor``) the
backward launches the kernel with the tiling the service would answer; on the CPU it runs the same
kernel source in the CPU twin. ``explain(...)`` says which tiling a call uses. Where the kernel cannot
run a case the loss uses PyTorch's own backward and says so once (:class:`FallbackWarning`). The
operator and its registrations live in ``kernel.torch_op``.
"""

from tiling_model.extras import missing_extra

try:
    from kernel.torch_op import (
        BCELoss,
        BCEWithLogitsLoss,
        FallbackWarning,
        OpTiling,
        binary_cross_entropy,
        binary_cross_entropy_with_logits,
        cache_info,
        explain,
        load_npu,
        reload_tables,
    )
except ModuleNotFoundError as e:  # the serving install has neither torch nor the CPU twin's ml_dtypes
    line = missing_extra(e, "bcetune.torch")
    if line is None:
        raise
    raise ModuleNotFoundError(line, name=e.name) from e

__all__ = [
    "BCELoss",
    "BCEWithLogitsLoss",
    "FallbackWarning",
    "OpTiling",
    "binary_cross_entropy",
    "binary_cross_entropy_with_logits",
    "cache_info",
    "explain",
    "load_npu",
    "reload_tables",
]
