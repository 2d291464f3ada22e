"""The Ascend C BinaryCrossEntropyGrad kernel sources and their runners.

``op_kernel/`` holds the kernel side (the tiling struct shared with the host lives here);
``op_host/`` the host tiling. The kernel body, its CPU twin and the torch_npu runner arrive
with the kernel issue; the struct layout is fixed now so the Python model serialises the
exact bytes the kernel will read.
"""

from __future__ import annotations

import re
from importlib import resources

TILING_HEADER = "op_kernel/bce_grad_tiling_data.h"


def tiling_struct_fields() -> list[tuple[str, str]]:
    """(type, name) of each field of ``BceGradTilingData``, in declaration order."""
    text = (resources.files("kernel") / TILING_HEADER).read_text()
    body = re.search(r"struct\s+BceGradTilingData\s*\{(.*?)\};", text, re.S)
    if body is None:
        raise RuntimeError(f"BceGradTilingData not found in {TILING_HEADER}")
    return re.findall(r"^\s*(\w+)\s+(\w+)\s*;", body.group(1), re.M)
