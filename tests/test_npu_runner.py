"""The torch_npu runner: on machines with an NPU it must agree with the CPU twin; elsewhere it
raises one clear NpuUnavailable line (these machines have no NPU: the agreement test skips)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from kernel import cpu, npu

HAS_NPU = importlib.util.find_spec("torch_npu") is not None


@pytest.mark.skipif(HAS_NPU, reason="torch_npu is installed: the unavailable path is not reachable")
def test_without_torch_npu_every_entry_point_says_what_is_missing() -> None:
    with pytest.raises(npu.NpuUnavailable, match=r"^torch_npu is not installed \(pip install 'bcetune\[npu\]'"):
        npu.runtime()
    with pytest.raises(npu.NpuUnavailable, match="torch_npu is not installed"):
        npu.bce_grad(None, None, None)


@pytest.mark.skipif(not HAS_NPU, reason="no torch_npu/NPU on this machine: the NPU path is not run here")
def test_npu_matches_the_cpu_twin() -> None:  # pragma: no cover - needs an NPU
    import torch

    rng = np.random.default_rng(0)
    n = 100_003
    p = rng.uniform(0.02, 0.98, n).astype(np.float32)
    y = rng.integers(0, 2, n).astype(np.float32)
    g = rng.normal(size=n).astype(np.float32)
    w = rng.uniform(0.5, 2, n).astype(np.float32)
    z = npu.bce_grad(*(torch.from_numpy(a).npu() for a in (g, p, y, w))).cpu().numpy()
    assert np.array_equal(z, cpu.bce_grad(g, p, y, w))
