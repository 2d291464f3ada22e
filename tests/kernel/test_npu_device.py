"""kernel.torch_op.npu_device without an NPU: the callback the extension calls on a device-buffer miss
answers the tiling the host cache resolves (struct bytes, block_dim, workspace), and loading the
extension where there is none raises NpuUnavailable with its reason, the same on every later call."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from kernel.npu import NpuUnavailable  # noqa: E402
from kernel.torch_op import npu_device  # noqa: E402
from kernel.torch_op.tilings import resolved, tables_dir  # noqa: E402


def test_the_miss_callback_answers_the_resolved_tiling(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(npu_device._npu.socs, 3, "Ascend910B2")  # as torch.npu.get_device_name would say
    shapes = [[], [4096, 8], [4096, 8], None, None]
    dtypes = ["float16", "float16", "float16", "", ""]
    got = npu_device._npu_tiling(3, shapes, dtypes, "mean", "probability")
    key = tuple(None if s is None else tuple(s) for s in shapes)
    op = resolved("Ascend910B2", tables_dir(), key, tuple(dtypes), "mean", "probability")
    assert got == (op.tiling.to_bytes(), op.tiling.block_dim, op.tiling.workspace_bytes)
    assert op.tiling.n == 4096 * 8 and len(got[0]) == len(op.tiling.field_dict()) * 8


def test_without_an_npu_loading_says_why_every_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(npu_device, "_npu", npu_device._NpuState())
    with pytest.raises(NpuUnavailable) as first:
        npu_device.load_npu()
    assert str(first.value)
    with pytest.raises(NpuUnavailable) as again:
        npu_device.load_npu()
    assert str(again.value) == str(first.value) and npu_device._npu.tried
    npu_device.clear_device_tilings()  # nothing loaded: nothing to clear, no error
