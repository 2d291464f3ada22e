"""The kernel's identity: a hash of the sources that decide what a tuned tiling does on the device.

Tables record it when they are swept or regated; the service compares it with the installed kernel
to say whether a table is stale. It covers the kernel (``kernel/op_kernel``), the tiling struct it reads
and the host tiling arithmetic that fills it (``tiling_model/include``: the struct, the core split, the
tiling core), listed in ``KERNEL_HASHED_SOURCES``; the CANN glue around them (TilingFunc, OpDef, build
files) does not change a tiling's result and is covered by the compile tests instead.
"""

from __future__ import annotations

import hashlib
from importlib import resources
from pathlib import Path

from tiling_model import BuildError

#: Paths from the directory that holds the packages (the repository, or site-packages when installed).
KERNEL_HASHED_SOURCES = (
    "kernel/op_kernel/*.h",
    "kernel/op_kernel/*.cpp",
    "tiling_model/include/bce_grad_tiling_data.h",
    "tiling_model/include/bce_grad_core_split.h",
    "tiling_model/include/bce_grad_tiling_core.h",
)


def kernel_root() -> Path:
    return Path(str(resources.files("kernel")))


def kernel_source_hash() -> str:
    """16 hex digits over the hashed sources' paths and bytes; BuildError if they are not installed."""
    root = kernel_root().parent
    files = sorted({f for pattern in KERNEL_HASHED_SOURCES for f in root.glob(pattern) if f.is_file()})
    if not any(f.parent.name == "op_kernel" for f in files):
        raise BuildError(f"the kernel sources are not installed under {root} (package data op_kernel/ missing)")
    digest = hashlib.sha256()
    for f in files:
        digest.update(str(f.relative_to(root).as_posix()).encode() + b"\0" + f.read_bytes())
    return digest.hexdigest()[:16]
