from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

#: The real torch_npu wheel, unpacked by make test beside the environment and not importable from it
#: (installed, its device autoload makes `import torch` fail on a host without CANN). Tests that need it run
#: their own processes with ``npu_user_env()``.
TORCH_NPU_SITE = Path(sys.prefix) / "torch-npu-site"


def npu_user_env() -> dict[str, str] | None:
    """The environment of a user who installed bcetune[npu] on a host without CANN: torch_npu importable
    (its device autoload on); None where the wheel is not unpacked (not x86_64, not built by make test)."""
    if not (TORCH_NPU_SITE / "torch_npu").is_dir():
        return None
    env = dict(os.environ)
    env.pop("TORCH_DEVICE_BACKEND_AUTOLOAD", None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(TORCH_NPU_SITE), env.get("PYTHONPATH", "")) if p)
    return env


settings.register_profile("ci", max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=150, deadline=None)
settings.register_profile("fast", max_examples=40, deadline=None)  # make test-fast's edit loop
settings.load_profile("ci" if os.environ.get("CI") else "dev")


def compile_cpp_driver(source: str, out_dir: Path) -> Path:
    """Build tests/kernel/cpp/<source> against kernel/op_host and the engine header with g++ (strict warnings);
    skip without g++."""
    cxx = shutil.which("g++")
    if cxx is None:
        pytest.skip("g++ not installed")
    root = Path(__file__).resolve().parents[1]
    exe = Path(out_dir) / Path(source).stem
    flags = ["-std=c++17", "-O1", "-ffp-contract=off", "-Wall", "-Wextra", "-Werror"]
    flags += ["-I", str(root / "kernel" / "op_host"), "-I", str(root / "tiling_model" / "include")]
    flags += ["-I", str(root / "kernel" / "npu_ext")]
    subprocess.run([cxx, *flags, str(root / "tests" / "kernel" / "cpp" / source), "-o", str(exe)], check=True)
    return exe


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """How many golden kernel cases ran in the CPU twin (for the README and closing notes)."""
    mod = sys.modules.get("test_kernel_golden") or sys.modules.get("tests.test_kernel_golden")
    if mod is not None:
        terminalreporter.write_line(f"kernel golden cases run in the CPU twin: {mod.GOLDEN_CASES['count']}")
    mod = sys.modules.get("test_explorer") or sys.modules.get("tests.test_explorer")
    if mod is not None:
        terminalreporter.write_line(f"explorer checks run in headless Chromium: {mod.RUN['browser']}")
    mod = sys.modules.get("test_cann_compile") or sys.modules.get("tests.test_cann_compile")
    if mod is not None:
        terminalreporter.write_line(f"compile checks run against the real CANN 8.5.0 headers: {mod.RUN['checks']}")


def graph_capturing_backend() -> tuple[Any, dict[str, list[str]]]:
    """A torch.compile backend that runs AOTAutograd and keeps each graph's called targets: ``graphs["forward"]``
    and ``graphs["backward"]`` (what a compiled loss's two graphs call)."""
    from torch._functorch.aot_autograd import aot_module_simplified, make_boxed_func

    graphs: dict[str, list[str]] = {}

    def backend(gm: Any, example: list) -> object:
        def keep(kind: str) -> Any:
            def compiler(g: Any, _: list) -> object:
                graphs[kind] = [str(n.target) for n in g.graph.nodes if n.op == "call_function"]
                return make_boxed_func(g.forward)

            return compiler

        return aot_module_simplified(gm, example, fw_compiler=keep("forward"), bw_compiler=keep("backward"))

    return backend, graphs
