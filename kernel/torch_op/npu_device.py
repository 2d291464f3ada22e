"""The operator on an Ascend NPU (``PrivateUse1``): the launch extension (``kernel/npu_ext``), whose
kernel registers with the dispatcher as it loads and whose tilings live in a bounded device-buffer cache
(a miss calls back here for the tiling). NOT RUN here: no NPU on bcetune's CI; compiled against the real
torch_npu headers there, run by ``python -m tuner doctor`` on an Ascend host."""

from __future__ import annotations

import sys
import threading
from typing import Any

import torch

from kernel.torch_op.tilings import CACHE_SIZE, on_reload, resolved, tables_dir


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


def npu_soc(device: int) -> str:
    soc = _npu.socs.get(device)
    if soc is None:
        soc = _npu.socs[device] = str(torch.npu.get_device_name(device))  # type: ignore[attr-defined]
    return soc


def _npu_tiling(
    device: int, shapes: list[Any], dtypes: list[str], reduction: str, wrt: str, mode: str = "grad"
) -> tuple[bytes, int, int]:
    """The extension's callback on a device-buffer miss: (struct bytes, block_dim, workspace bytes); ``mode``
    fused for ``bce_with_logits_fused`` (no grad operand)."""
    key = tuple(None if s is None else tuple(int(d) for d in s) for s in shapes)
    op = resolved(npu_soc(device), tables_dir(), key, tuple(dtypes), reduction, wrt, mode)
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


def clear_device_tilings() -> None:
    """Drop the extension's device buffers (with the host cache: ``reload_tables``)."""
    if _npu.ext is not None:
        _npu.ext.clear_tilings()


on_reload(clear_device_tilings)


if "torch_npu" in sys.modules:  # an NPU user: make the op's NPU kernel available as soon as we load
    try:
        load_npu()
    except Exception:  # noqa: BLE001  (the reason is kept and given where the op is used)
        pass
