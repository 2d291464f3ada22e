"""``python -m tuner doctor``: here (no CANN, no NPU) it stops at the first missing piece with one
line; its golden cases and their check run on the CPU twin as they would on the device."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kernel import cpu
from tuner.doctor import golden_cases, run_golden
from tuner.sweep import sweep_keys

pytestmark = pytest.mark.slow  # the doctor's CLI in subprocesses

ROOT = Path(__file__).resolve().parents[2]


def doctor(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in env.items() if k != "TORCH_DEVICE_BACKEND_AUTOLOAD"}  # as a user runs it
    return subprocess.run(
        [sys.executable, "-m", "tuner", "doctor", "--no-build"], capture_output=True, text=True, env=env, cwd=ROOT
    )


def test_without_cann_it_stops_at_the_first_piece_with_one_line() -> None:
    proc = doctor({k: v for k, v in os.environ.items() if k != "ASCEND_HOME_PATH"})
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "FAIL  CANN: ASCEND_HOME_PATH is not set (install the CANN toolkit and source its set_env.sh)"
    ]


def test_with_cann_but_no_torch_npu_runtime_it_stops_there(tmp_path: Path) -> None:
    (tmp_path / "version.cfg").write_text("# CANN\nversion=8.5.0\n")
    proc = doctor(dict(os.environ, ASCEND_HOME_PATH=str(tmp_path)))
    assert proc.returncode == 1
    assert proc.stdout.splitlines() == [f"ok    cann     {tmp_path} (version 8.5.0, from version.cfg)"]
    [line] = proc.stderr.splitlines()
    assert line.startswith("FAIL  torch_npu: torch_npu is ")  # "not installed (...)" or "installed but cannot load"


def test_golden_cases_cover_every_variant_the_tables_tune() -> None:
    cases = golden_cases()
    variants = {c.variant for c in cases}
    keys = sweep_keys("Ascend910B2", ["float32", "float16", "bfloat16", "int32", "int16"], ["none", "sum", "mean"],
                      [True, False], [1], ["none", "full", "last_dim"], ["logit", "probability"])  # fmt: skip
    assert variants == {k.variant for k in keys} and len(variants) == 84
    sizes = {int(np.prod(c.shape)) for c in cases}
    assert min(sizes) == 1 and max(sizes) == 100_003


def twin(t, a):  # noqa: ANN001, ANN201
    out = np.zeros(t.shape, dtype=cpu.DTYPES[t.variant.dtype])
    cpu.run_tiling(t, a, out)
    return out


def test_golden_check_passes_on_the_twin_and_catches_a_wrong_element() -> None:
    cases = golden_cases()
    assert run_golden(twin, "Ascend910B2", cases) == []

    def off_by_one(t, a):  # noqa: ANN001, ANN202
        z = twin(t, a)
        flat = z.reshape(-1)
        flat[-1] = flat[-1] + (1 if np.issubdtype(z.dtype, np.integer) else flat[-1] * 0.01 + 1)
        return z

    def faulting(t, a):  # noqa: ANN001, ANN202
        raise RuntimeError("aclrtlaunch_bce_grad failed with 507015\nmore")

    some = cases[:: len(cases) // 7]
    failures = run_golden(off_by_one, "Ascend910B2", some)
    assert len(failures) == len(some) and all("1 of" in f and "elements off the reference" in f for f in failures)
    assert run_golden(faulting, "Ascend910B2", some[:1]) == [
        f"{some[0].label()}: launch failed: aclrtlaunch_bce_grad failed with 507015"
    ]


def test_the_plan_says_what_a_device_sweep_will_do_and_cost() -> None:
    proc = subprocess.run([sys.executable, "-m", "tuner", "doctor", "--plan", "Ascend910B2"], capture_output=True,
                          text=True, cwd=ROOT)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "--backend npu" in out and "--device N" in out and "924 keys" in out and "refitted" in out
    assert "s of device time" in out and "h per device" in out
    from tuner.device_time import REFIT_S, REFIT_S_PER_KEY, STORAGE_S_PER_TRIAL, refits_seconds

    assert f"about {refits_seconds(924) / 60:.0f} min in all" in out  # the sum of each refit's cost as keys accrue
    assert refits_seconds(2) == pytest.approx(2 * REFIT_S + 3 * REFIT_S_PER_KEY)
    # every trial of every key once in the storage (a second look's are the key's own)
    assert f"in the storage about {924 * 20 * STORAGE_S_PER_TRIAL / 60:.0f} min (18480 trials" in out


def test_the_torch_operator_checks_pass_on_the_cpu_and_catch_a_wrong_gradient(monkeypatch) -> None:  # noqa: ANN001
    """The doctor's check of torch.ops.bcetune.bce_grad as the losses' backward, here on the CPU (the
    twin) as it runs on the NPU; a kernel that is off, or a fallback to PyTorch's backward, fails it."""
    import torch

    from kernel import torch_op
    from tuner.doctor import TORCH_OP_CASES, torch_op_failures, torch_op_timing

    cases, failures = torch_op_failures(torch, "cpu")
    assert cases == len(TORCH_OP_CASES) == 30 and failures == []
    [line] = list(torch_op_timing(torch, "cpu", lambda: None, sizes=(4096,)))
    assert "bce_grad(probability)" in line and "aten.binary_cross_entropy_backward" in line
    real_run, real_fused = cpu.run_tiling, cpu.run_fused_tiling

    def off(tiling, arrays, out, **kw):  # noqa: ANN001, ANN003, ANN202  (the kernel 1% off)
        result = real_run(tiling, arrays, out, **kw)
        out *= 1.01
        return result

    def fused_off(tiling, arrays, dx, loss, **kw):  # noqa: ANN001, ANN003, ANN202  (its fused mode 1% off)
        result = real_fused(tiling, arrays, dx, loss, **kw)
        dx *= 1.01
        return result

    monkeypatch.setattr(cpu, "run_tiling", off)
    monkeypatch.setattr(cpu, "run_fused_tiling", fused_off)
    _, failures = torch_op_failures(torch, "cpu")
    monkeypatch.setattr(cpu, "run_tiling", real_run)
    monkeypatch.setattr(cpu, "run_fused_tiling", real_fused)
    assert len(failures) == 30 and all("elements off the float64 backward" in f for f in failures)
    monkeypatch.setattr(torch_op.fallback, "_cpu_compiler", False)
    _, failures = torch_op_failures(torch, "cpu")
    assert len(failures) == 30 and all("the kernel does not run (no C++ compiler" in f for f in failures)
