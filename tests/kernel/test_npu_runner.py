"""The torch_npu runner: on machines with an NPU it must agree with the CPU twin; elsewhere every entry
point raises one clear NpuUnavailable line, with torch_npu absent or installed without CANN (these
machines have no NPU: the agreement test skips and says why)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import numpy as np
import pytest
from conftest import npu_user_env

from kernel import cpu, npu

NPU_USER_ENV = npu_user_env()


def npu_reason() -> str | None:
    """None where an NPU runtime is up, else why not (the NpuUnavailable line)."""
    try:
        npu.runtime()
    except npu.NpuUnavailable as e:
        return str(e)
    return None


def test_without_torch_npu_every_entry_point_says_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "torch_npu" else find_spec(name, *a)
    )
    with pytest.raises(npu.NpuUnavailable, match=r"^torch_npu is not installed \(pip install 'bcetune\[npu\]'"):
        npu.runtime()
    with pytest.raises(npu.NpuUnavailable, match="torch_npu is not installed"):
        npu.bce_grad(None, None, None)


@pytest.mark.skipif(NPU_USER_ENV is None, reason="no torch_npu wheel unpacked here (make test does it on x86_64)")
@pytest.mark.parametrize("autoload", [True, False])
def test_installed_torch_npu_without_cann_is_one_clear_line(autoload: bool) -> None:
    """The real torch_npu wheel without CANN: `import torch` itself fails once torch_npu autoloads
    (RuntimeError), and `import torch_npu` fails on CANN's missing libraries (ImportError). Both
    become one NpuUnavailable line naming the missing library, in a fresh process as a user sees it."""
    assert NPU_USER_ENV is not None
    env = dict(NPU_USER_ENV)
    if not autoload:
        env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    code = (
        "from kernel import npu\n"
        "try:\n    npu.runtime()\nexcept npu.NpuUnavailable as e:\n    print('UNAVAILABLE', e)\n"
        "try:\n    npu.bce_grad(None, None, None)\nexcept npu.NpuUnavailable as e:\n    print('UNAVAILABLE', e)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0 and len(lines) == 2, proc.stdout + proc.stderr
    for line in lines:
        assert line.startswith("UNAVAILABLE torch_npu is installed but cannot load ("), line
        assert line.endswith("): install CANN and source its set_env.sh"), line
        assert ".so" in line  # names the library CANN would provide (libhccl.so, libascendcl.so, ...)


@pytest.mark.skipif(npu_reason() is not None, reason=f"no NPU runtime here: {npu_reason()}")
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
