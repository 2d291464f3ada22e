"""The Ascend C BinaryCrossEntropyGrad kernel sources and their runners.

``op_kernel/`` is the kernel, ``op_host/`` the CANN host side (the tiling struct they share, and the
host tiling arithmetic, live below both in ``tiling_model/include``), ``cpu/`` the CPU twin that runs
the same source, ``npu.py`` the torch_npu runner,
``reference.py`` the float64 reference, ``sources.py`` the kernel's hash.

Names: the requirement's formula is ``z = weight * grad * (p - y)`` and it calls the predicted
probabilities ``logits`` and the targets ``labels``. The kernel keeps those names at the CANN
boundary (its entry parameters, the GM tensors the twin reports faults on, the OpDef inputs);
bcetune's own Python API says ``p`` and ``y``. ``grad``, ``weight`` and ``pos_weight`` are the same
on both sides.
"""

from __future__ import annotations

import re

from tiling_model.engine import INCLUDE_DIR

TILING_HEADER = INCLUDE_DIR / "bce_grad_tiling_data.h"


def tiling_struct_fields() -> list[tuple[str, str]]:
    """(type, name) of each field of ``BceGradTilingData``, in declaration order."""
    text = TILING_HEADER.read_text()
    body = re.search(r"struct\s+BceGradTilingData\s*\{(.*?)\};", text, re.S)
    if body is None:
        raise RuntimeError(f"BceGradTilingData not found in {TILING_HEADER}")
    return re.findall(r"^\s*(\w+)\s+(\w+)\s*;", body.group(1), re.M)
