"""The CPU-twin gate every table entry passes, and the cpu / npu measurement backends."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kernel import cpu
from tiling_model import TilingParams, Variant, _engine, compute_tiling
from tuner import gate
from tuner.backends import CpuTwinBackend, MeasurementError, make_backend
from tuner.gate import FULL_RUN_LIMIT, GateFailure, check_tiling

pytestmark = pytest.mark.slow  # sweeps through the gate and every backend

ROOT = Path(__file__).resolve().parents[2]


def tuner(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tuner", *args], capture_output=True, text=True, cwd=cwd)


@pytest.mark.parametrize(
    ("n", "dtype", "reduction", "weight", "pos_weight", "wrt"),
    [
        (1000, "float32", "none", True, "none", "logit"),
        (4096, "float16", "mean", False, "full", "logit"),
        (1 << 20, "bfloat16", "sum", True, "last_dim", "logit"),
        (65536, "float32", "mean", True, "none", "probability"),
        (4096, "int16", "none", True, "last_dim", "logit"),
        (1 << 26, "float16", "mean", True, "full", "logit"),  # partial run: three cores, windows
        (1 << 30, "int32", "none", False, "none", "logit"),
    ],
)
def test_gate_passes_correct_tilings(
    n: int, dtype: str, reduction: str, weight: bool, pos_weight: str, wrt: str
) -> None:
    r = check_tiling(
        "Ascend910B2", n, Variant(dtype, reduction, weight, pos_weight, wrt), TilingParams(block_bytes=1024)
    )
    assert r.cores_run >= 1 and r.elements_checked >= min(n, 3 * 2 * gate.WINDOW if n > FULL_RUN_LIMIT else n) - 64


def _corrupting(monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    real = cpu.run_tiling

    def run(t, arrays, out, **kw):  # noqa: ANN001, ANN202
        res = real(t, arrays, out, **kw)
        z = out.reshape(-1)
        if how == "window":
            z[3] = z[3] + np.asarray(1, dtype=z.dtype)
        elif how == "elsewhere":
            z[gate.WINDOW + 5] = np.asarray(1, dtype=z.dtype)
        elif how == "fault":
            raise cpu.KernelFault("[gm_out_of_bounds] core 0: simulated")
        return res

    monkeypatch.setattr(cpu, "run_tiling", run)


@pytest.mark.parametrize(
    ("how", "n", "match"),
    [
        ("window", 5000, "wrong elements, first at 3"),
        ("elsewhere", 1 << 26, "non-zero output where every input was zero"),
        ("fault", 5000, "twin fault"),
    ],
)
def test_gate_rejects_wrong_output_and_faults(monkeypatch: pytest.MonkeyPatch, how: str, n: int, match: str) -> None:
    _corrupting(monkeypatch, how)
    with pytest.raises(GateFailure, match=match):
        check_tiling("Ascend910B2", n, Variant("float32"), TilingParams())


@pytest.mark.parametrize(
    ("n", "dtype", "reduction", "pos_weight"),
    [
        (1000, "float32", "none", "none"),
        (4096, "float16", "mean", "last_dim"),
        (1 << 20, "bfloat16", "sum", "full"),
        (1 << 26, "float32", "mean", "last_dim"),
    ],  # fmt: skip
)
def test_the_gate_checks_the_fused_mode_and_rejects_its_wrong_outputs(
    monkeypatch: pytest.MonkeyPatch, n: int, dtype: str, reduction: str, pos_weight: str
) -> None:
    """A fused-mode entry is gated on dx, the loss (none) and each core's loss sum (sum / mean) against the
    float64 closed form; one wrong dx element, or a core's sum off, fails it."""
    v = Variant(dtype, reduction, True, pos_weight, "logit", "fused")
    params = TilingParams(block_bytes=1024)
    assert check_tiling("Ascend910B2", n, v, params).elements_checked >= min(n, 2 * gate.WINDOW)
    real = cpu.run_fused_tiling

    def corrupt(t, arrays, dx, loss, **kw):  # noqa: ANN001, ANN202
        res = real(t, arrays, dx, loss, **kw)
        target = dx if reduction == "none" or n > FULL_RUN_LIMIT else loss
        flat = target.reshape(-1)
        flat[3] = flat[3] * np.asarray(1.01, dtype=flat.dtype) + np.asarray(0.01, dtype=flat.dtype)
        return res

    monkeypatch.setattr(cpu, "run_fused_tiling", corrupt)
    with pytest.raises(GateFailure, match="wrong elements|loss sum"):
        check_tiling("Ascend910B2", n, v, params)


def tampered_checkout(tmp_path: Path) -> None:
    """A checkout in tmp_path whose kernel computes p + y where it should compute p - y."""
    tampered = tmp_path / "kernel"
    subprocess.run(["cp", "-r", str(ROOT / "kernel"), str(tampered)], check=True)
    src = tampered / "op_kernel" / "bce_grad.h"
    src.write_text(src.read_text().replace("Sub(p, p, y, n);", "Add(p, p, y, n);"))
    for pkg in ("model_tools", "tuner", "service"):
        (tmp_path / pkg).symlink_to(ROOT / pkg)
    model = tmp_path / "tiling_model"  # the sources, and the engine compiled at install time
    model.mkdir()
    for f in (ROOT / "tiling_model").iterdir():
        (model / f.name).symlink_to(f)
    engine = Path(_engine.__file__)
    if not (model / engine.name).exists():
        (model / engine.name).symlink_to(engine)


# Run ``python -m tuner`` from the tampered checkout: drop the editable install's import redirect (it would
# send ``kernel`` back to the real sources) so the checkout in the working directory is what is imported.
TAMPERED_TUNER = """
import runpy, sys
sys.meta_path[:] = [f for f in sys.meta_path if not type(f).__module__.startswith("_editable")]
sys.path.insert(0, "")
sys.argv = ["tuner", *sys.argv[1:]]
runpy.run_module("tuner", run_name="__main__", alter_sys=True)
"""


def test_a_gate_failure_writes_no_table_and_says_why(tmp_path: Path) -> None:
    """A kernel that computes wrongly (here: the twin built from a tampered source) must not ship."""
    tampered_checkout(tmp_path)
    out = tmp_path / "t.json"
    env_cache = tmp_path / "cache"
    r = subprocess.run(
        [sys.executable, "-c", TAMPERED_TUNER, "sweep", "--soc", "Ascend910B2", "--dtypes", "float32", "--reductions",
         "none", "--sizes", "4096", "--trials", "2", "--storage", f"sqlite:///{tmp_path / 's.db'}", "--out",
         str(out), "--no-progress"],
        capture_output=True, text=True, cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "BCETUNE_CACHE_DIR": str(env_cache)},
    )  # fmt: skip
    assert r.returncode == 1, r.stderr
    assert "failed the CPU-twin gate; no table written" in r.stderr and "wrong elements" in r.stderr
    assert not out.exists()


def test_cpu_backend_times_the_twin_and_checks_each_tiling_once() -> None:
    b = make_backend("cpu")
    assert isinstance(b, CpuTwinBackend) and not b.deterministic
    t = compute_tiling([100_000], Variant("float16", "mean"), None, "Ascend910B2")
    samples = [b.sample(t) for _ in range(3)]
    assert all(s > 0 for s in samples)
    big = compute_tiling([CpuTwinBackend.MAX_ELEMENTS + 1], Variant("float32"))
    with pytest.raises(MeasurementError, match="runs up to"):
        b.sample(big)
    seed = compute_tiling([100], Variant("float32"), None, "Ascend910B2", "seed")
    with pytest.raises(MeasurementError, match="kernel fault in the CPU twin"):
        b.sample(seed)
    with pytest.raises(ValueError, match="apply to the model and synthetic backends"):
        make_backend("cpu", noise=0.05)


def test_cpu_backend_sweep_writes_a_gated_table(tmp_path: Path) -> None:
    out = tmp_path / "cpu.json"
    r = tuner("sweep", "--soc", "Ascend910B2", "--backend", "cpu", "--dtypes", "float32,bfloat16", "--reductions",
              "none", "--sizes", "1000,70000", "--trials", "4", "--repeats", "3", "--warmup", "1",
              "--storage", f"sqlite:///{tmp_path / 's.db'}", "--out", str(out), "--no-progress")  # fmt: skip
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert doc["backend"] == "cpu" and len(doc["entries"]) == 8
    assert all(e["spread_us"] >= 0 and e["tuned_us"] > 0 for e in doc["entries"])


def test_npu_backend_unavailable_is_one_error_line(tmp_path: Path) -> None:
    out = tmp_path / "npu.json"
    r = tuner("sweep", "--soc", "Ascend910B2", "--backend", "npu", "--sizes", "1000", "--trials", "2",
              "--storage", f"sqlite:///{tmp_path / 's.db'}", "--out", str(out), "--no-progress")  # fmt: skip
    assert r.returncode == 2 and not out.exists()
    [line] = r.stderr.strip().splitlines()
    if importlib.util.find_spec("torch_npu") is None:
        assert line == ("python -m tuner: error: torch_npu is not installed (pip install 'bcetune[npu]' on a machine "
                        "with CANN and an NPU)")  # fmt: skip
    else:  # the real wheel without CANN
        assert line.startswith("python -m tuner: error: torch_npu is installed but cannot load (")
        assert line.endswith("): install CANN and source its set_env.sh")


def small_table(path: Path, kernel_hash: str) -> dict:
    """Four shipped 910B2 entries at small sizes, written as a table with the given kernel hash."""
    doc = json.loads((ROOT / "service" / "tables" / "Ascend910B2.json").read_text())
    plain = [e for e in doc["entries"] if e["size"] <= 4096 and e["pos_weight"] == "none" and e["wrt"] == "logit"]
    keep = [e for e in plain if e["dtype"] == "float32"][:2] + [e for e in plain if e["dtype"] == "int16"][:2]
    doc.update(entries=keep, kernel_hash=kernel_hash)
    path.write_text(json.dumps(doc))
    return doc


def test_regate_checks_every_entry_and_stamps_the_current_kernel_hash(tmp_path: Path) -> None:
    from kernel.sources import kernel_source_hash

    path = tmp_path / "Ascend910B2.json"
    before = small_table(path, "0123456789abcdef")
    r = tuner("regate", "--soc", "Ascend910B2", "--table", str(path), "--no-progress")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"regated {path}: 4 entries pass")
    after = json.loads(path.read_text())
    assert after["kernel_hash"] == kernel_source_hash() != before["kernel_hash"]
    assert after["entries"] == before["entries"] and after["created"] == before["created"]


def test_regate_with_a_wrong_kernel_leaves_the_table_as_it_was(tmp_path: Path) -> None:
    tampered_checkout(tmp_path)
    path = tmp_path / "Ascend910B2.json"
    small_table(path, "0123456789abcdef")
    before = path.read_bytes()
    r = subprocess.run(
        [sys.executable, "-c", TAMPERED_TUNER, "regate", "--soc", "Ascend910B2", "--table", str(path), "--no-progress"],
        capture_output=True, text=True, cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "BCETUNE_CACHE_DIR": str(tmp_path / "cache")},
    )  # fmt: skip
    assert r.returncode == 1, r.stderr
    assert "entries failed the CPU-twin gate; the table is unchanged" in r.stderr and "wrong elements" in r.stderr
    assert path.read_bytes() == before
    r = tuner("regate", "--soc", "Ascend910B1", "--table", str(path), "--no-progress")
    assert r.returncode == 2 and r.stderr.strip().endswith("holds SoC 'Ascend910B2', not 'Ascend910B1'")


def test_a_resweep_gates_only_tilings_the_table_it_replaces_has_not_passed_against_this_kernel(tmp_path: Path) -> None:
    """The gate is a function of the kernel sources, the SoC, the variant, the size and the tiling: a re-sweep
    into a table carrying the current kernel hash runs only the tilings that moved. A table of another kernel,
    or --gate-all, certifies nothing."""
    out = tmp_path / "t.json"

    def sweep(*extra: str) -> str:
        r = tuner("sweep", "--soc", "Ascend910B2", "--dtypes", "float32,int16", "--reductions", "none",
                  "--weights", "full", "--sizes", "1000,70000", "--trials", "3", "--storage",
                  f"sqlite:///{tmp_path / 's.db'}", "--out", str(out), "--no-progress", *extra)  # fmt: skip
        assert r.returncode == 0, r.stderr
        return r.stdout

    assert "4 tilings gated in the CPU twin, 0 passed it before" in sweep()
    assert "0 tilings gated in the CPU twin, 4 passed it before" in sweep()
    doc = json.loads(out.read_text())
    moved = next(e for e in doc["entries"] if e["params"]["core_num"] > 1)
    moved["params"] = {**moved["params"], "core_num": moved["params"]["core_num"] - 1}  # not the tiling it tunes
    out.write_text(json.dumps(doc))
    assert "1 tilings gated in the CPU twin, 3 passed it before" in sweep()
    assert "4 tilings gated in the CPU twin, 0 passed it before" in sweep("--gate-all")
    doc = json.loads(out.read_text())
    out.write_text(json.dumps({**doc, "kernel_hash": "0123456789abcdef"}))
    assert "4 tilings gated in the CPU twin, 0 passed it before" in sweep()


def test_a_merge_into_a_table_gated_against_other_sources_keeps_its_stale_kernel_hash(tmp_path: Path) -> None:
    """A table's kernel hash says every entry passed the gate against those sources (what a re-sweep's gate reuse
    and the service trust): a partial sweep merged into a table of another kernel leaves it stale until regated;
    into a table of the same kernel, it stays current."""
    from kernel.sources import kernel_source_hash

    current = kernel_source_hash()
    base, newer = tmp_path / "Ascend910B2.json", tmp_path / "newer.json"
    small_table(base, "0123456789abcdef")
    doc = small_table(newer, current)
    newer.write_text(json.dumps({**doc, "entries": doc["entries"][:1]}))
    r = tuner("merge", "--soc", "Ascend910B2", "--table", str(base), "--from", str(newer))
    assert r.returncode == 0, r.stderr
    assert "keeps that hash until `python -m tuner regate" in r.stdout
    assert json.loads(base.read_text())["kernel_hash"] == "0123456789abcdef"
    small_table(base, current)
    r = tuner("merge", "--soc", "Ascend910B2", "--table", str(base), "--from", str(newer))
    assert r.returncode == 0 and "regate" not in r.stdout, r.stdout
    assert json.loads(base.read_text())["kernel_hash"] == current
