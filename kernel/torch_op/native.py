"""The fused loss's CPU kernel (``csrc/bce_with_logits_cpu.cpp``) and its C++ autograd node
(``csrc/bce_with_logits_autograd.cpp``): built with g++ against the installed torch's own headers and libraries
on first use, cached like the CPU twin, and loaded as the operators ``bcetune::bce_with_logits_fused_cpu``
(loss and gradient) and ``bcetune::bce_with_logits_fused_loss`` (the loss whose backward returns the kept
gradient: an eager step without Python autograd frames, ~25 us fewer).

Why native: the loss's ATen composite takes a dozen passes over the data and each ATen call from Python
costs microseconds, which made the fused loss 1.2-1.4x PyTorch's own step at 64-256 Ki elements. The
kernel makes one pass (one exp and one log per element, vectorised with ATen's ``Vectorized<float>`` at the
capability torch itself runs, ``torch.backends.cpu.get_cpu_capability()``; threads from ATen's pool).

Where it cannot be built (no compiler, a torch without its headers) the fused loss runs its ATen composite
(``kernel.torch_op.fused``): slower, the same numbers within rounding. ``native_error()`` says why.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import threading
from importlib import resources
from pathlib import Path
from typing import Any

import torch

from kernel.cpu import build_once, cache_dir
from kernel.torch_op.fallback import fallback

OP_NAME = "bcetune::bce_with_logits_fused_cpu"
SOURCE = "bce_with_logits_cpu.cpp"
#: the kernel and the C++ autograd node around it (``bcetune::bce_with_logits_fused_loss``): one library
SOURCES = (SOURCE, "bce_with_logits_autograd.cpp")
#: g++ flags per ATen CPU capability: the ones ATen's own kernels of that capability are built with, and
#: the macros that select ``Vectorized``'s implementation (SLEEF's exp and log, from libtorch_cpu).
CAPABILITY_FLAGS: dict[str, tuple[str, ...]] = {
    "AVX512": (
        "-mavx512f",
        "-mavx512bw",
        "-mavx512vl",
        "-mavx512dq",
        "-mfma",
        "-DCPU_CAPABILITY=AVX512",
        "-DCPU_CAPABILITY_AVX512",
    ),
    "AVX2": ("-mavx2", "-mfma", "-DCPU_CAPABILITY=AVX2", "-DCPU_CAPABILITY_AVX2"),
    "DEFAULT": ("-DCPU_CAPABILITY=DEFAULT",),
}
CXXFLAGS = ("-std=c++17", "-O3", "-fopenmp", "-fPIC", "-shared", "-Wall", "-Wno-c++20-extensions")

_lock = threading.Lock()
_state: dict[str, Any] = {}


def source(name: str = SOURCE) -> Path:
    return Path(str(resources.files("kernel"))) / "torch_op" / "csrc" / name


def capability() -> str:
    """The ATen capability to build for: torch's own (``ATEN_CPU_CAPABILITY`` lowers it), else DEFAULT."""
    chosen = torch.backends.cpu.get_cpu_capability()
    return chosen if chosen in CAPABILITY_FLAGS else "DEFAULT"


def _torch_dirs() -> tuple[Path, Path]:
    root = Path(torch.__file__).parent
    return root / "include", root / "lib"


def command(cxx: str, out: Path, cap: str) -> list[str]:
    """The g++ command that builds the kernel for ``cap`` into ``out``."""
    include, lib = _torch_dirs()
    abi = f"-D_GLIBCXX_USE_CXX11_ABI={int(torch.compiled_with_cxx11_abi())}"
    return [cxx, *CXXFLAGS, abi, *CAPABILITY_FLAGS[cap], "-I", str(include),
            "-I", str(include / "torch" / "csrc" / "api" / "include"), *(str(source(f)) for f in SOURCES),
            "-L", str(lib), "-ltorch_cpu", "-lc10", f"-Wl,-rpath,{lib}", "-o", str(out)]  # fmt: skip


def library_path(cxx: str, cap: str) -> Path:
    """Where the build for this source, torch, compiler and capability is cached."""
    h = hashlib.sha256()
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True, check=False).stdout
    for part in (version, torch.__version__, torch.__file__, cap, " ".join(CXXFLAGS)):
        h.update(part.encode())
    for name in SOURCES:
        h.update(name.encode() + b"\0" + source(name).read_bytes())
    return cache_dir() / f"bce_with_logits_cpu-{cap.lower()}-{h.hexdigest()[:16]}.so"


def _build(cxx: str, cap: str, out: Path) -> None:
    print(f"bcetune: building the fused loss's CPU kernel ({SOURCE}, g++, ~10 s; cached in {out.parent})",
          file=sys.stderr, flush=True)  # fmt: skip
    proc = subprocess.run(command(cxx, out, cap), capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"compiling {SOURCE} failed:\n{proc.stderr.strip()[-4000:]}")


def load() -> bool:
    """Build (once) and load the kernel; True when ``torch.ops.bcetune.bce_with_logits_fused_cpu`` runs
    it. A failure is remembered (``native_error``), not retried."""
    if _state.get("loaded") is True:
        return True
    with _lock:
        if "loaded" in _state:
            return _state["loaded"] is True
        try:
            if os.environ.get("BCETUNE_CPU_NATIVE", "1") == "0":
                raise RuntimeError("$BCETUNE_CPU_NATIVE=0")
            cxx = shutil.which(os.environ.get("CXX", "g++"))
            if cxx is None:
                raise RuntimeError("no C++ compiler (install g++ or set CXX)")
            include, _ = _torch_dirs()
            if not (include / "ATen" / "cpu" / "vec" / "vec.h").exists():
                raise RuntimeError(f"this torch has no C++ headers ({include})")
            cap = capability()
            path = build_once(library_path(cxx, cap), lambda out: _build(cxx, cap, out))
            torch.ops.load_library(str(path))
            _define_fallback_warning()
            _state["loaded"] = True
        except Exception as e:  # noqa: BLE001  # any failure: the ATen composite runs instead
            _state["loaded"] = False
            _state["error"] = str(e)
    return _state["loaded"] is True


_WARNING_LIB: list[torch.library.Library] = []  # held: a Library's registrations end with it


def _define_fallback_warning() -> None:
    """``bcetune::fallback_warning(like, why)``: how the C++ autograd node, falling back to PyTorch's formula
    for a double backward, issues bcetune's own ``FallbackWarning`` (a Python warning class C++ cannot raise)."""
    if _WARNING_LIB:
        return
    lib = torch.library.Library("bcetune", "FRAGMENT")
    lib.define("fallback_warning(Tensor like, str why) -> ()")
    lib.impl("fallback_warning", lambda like, why: fallback(why), "CompositeImplicitAutograd")
    _WARNING_LIB.append(lib)


def fused_loss() -> Any:
    """``torch.ops.bcetune.bce_with_logits_fused_loss.default`` once loaded (the overload itself: a step below
    32 Ki elements is ~30 us, and each lookup through ``torch.ops`` costs a few hundred ns), else None."""
    op = _state.get("loss_op")
    if op is None and load():
        op = _state["loss_op"] = torch.ops.bcetune.bce_with_logits_fused_loss.default
    return op


def native_error() -> str | None:
    """Why the native kernel is not in use (None when it is, or has not been tried)."""
    error = _state.get("error")
    return error if isinstance(error, str) else None
