"""Pick tiling parameters with the cost model alone (no tuning table needed)."""

from __future__ import annotations

from tiling_model.kernels import bce_grad_kernel
from tiling_model.soc import SocProfile
from tiling_model.space import score_space
from tiling_model.tiling import TilingData, compute_tiling
from tiling_model.validate import validate


def model_best(
    n: int,
    dtype: str,
    reduction: str,
    weight: bool,
    soc: SocProfile,
    pos_weight: str = "none",
    wrt: str = "logit",
    classes: int = 1,
) -> TilingData:
    """The model's fastest valid exact-scheme tiling over the whole search space."""
    kernel = bce_grad_kernel(dtype, reduction, weight, pos_weight, wrt, "exact", classes)
    scored = score_space(kernel, soc, max(n, 1))
    shape = [n] if pos_weight != "last_dim" else [n // classes, classes]
    for i in [scored.best_index(), *scored.ranked(16)]:
        t = compute_tiling(shape, dtype, reduction, scored.params(i), soc, "exact", weight, pos_weight, wrt)
        if not validate(t, soc):
            return t
    raise RuntimeError(f"no valid tiling in the model's space for n={n} {dtype}/{reduction} on {soc.name}")
