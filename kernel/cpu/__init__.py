"""Run the real kernel source (``kernel/op_kernel``) on the CPU twin of the AscendC API.

The twin (``kernel_operator.h`` and ``twin_*.h`` here) compiles the unchanged kernel with g++;
each block index runs with its own TPipe and UB, and anything the NPU would get silently wrong
or hang on raises :class:`KernelFault` with the twin's message (core, operation, tensor, offset).

The kernel is built as one of CANN's two flows would build it (``FLOWS``): ``launch`` (the
kernel-launch library that ``kernel/npu.py`` and the tuner use: no generated tiling macros) or
``op`` (the custom-op package: ``-DBCE_GRAD_CUSTOM_OP``, one binary per dtype through
``DTYPE_LOGITS``, and ``op_tiling_shim.h`` force-included as the op compiler force-includes its
generated ``GET_TILING_DATA_WITH_STRUCT``). Each shared library is built once per source hash into
``$BCETUNE_CACHE_DIR`` (default ``~/.cache/bcetune``) and reused.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from kernel import TILING_HEADER
from tiling_model import BadRequest, BuildError, TilingData, TilingParams, Variant, compute_tiling, load_soc
from tiling_model import KernelFault as _KernelFault
from tiling_model.variant import Broadcast, broadcast_of, pos_weight_of

DTYPES: dict[str, np.dtype] = {
    "float32": np.dtype(np.float32),
    "float16": np.dtype(np.float16),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "int32": np.dtype(np.int32),
    "int16": np.dtype(np.int16),
}
TENSOR_NAMES = ("grad", "logits", "labels", "weight", "pos_weight", "z", "workspace", "tiling")
#: The fused entry's GM arguments (bce_with_logits_fused.cpp): no grad; dx and the loss (or per-core sums) out.
FUSED_TENSOR_NAMES = ("logits", "labels", "weight", "pos_weight", "dx", "loss", "workspace", "tiling")
CXXFLAGS = ("-std=c++17", "-O2", "-ffp-contract=off", "-fPIC", "-shared", "-pthread", "-Wall", "-Wextra", "-Werror")
#: The two CANN build flows the twin can compile the kernel as.
FLOWS = ("launch", "op")
#: The C type the custom-op build puts in DTYPE_LOGITS for each dtype.
DTYPE_CTYPES = {"float32": "float", "float16": "half", "bfloat16": "bfloat16_t", "int32": "int32_t", "int16": "int16_t"}


def flow_flags(flow: str, dtype: str | None = None) -> tuple[str, ...]:
    """The extra compiler flags of a flow: none for ``launch``; the custom-op build's defines and its
    force-included tiling header for ``op`` (one library per dtype)."""
    if flow == "launch":
        return ()
    if flow != "op":
        raise BadRequest(f"unknown build flow {flow!r}; known: {', '.join(FLOWS)}")
    if dtype not in DTYPE_CTYPES:
        raise BadRequest(f"the op flow builds one library per dtype; got {dtype!r}, known: {', '.join(DTYPE_CTYPES)}")
    shim = Path(str(resources.files("kernel"))) / "cpu" / "op_tiling_shim.h"
    return ("-DBCE_GRAD_CUSTOM_OP=1", f"-DDTYPE_LOGITS={DTYPE_CTYPES[dtype]}", "-include", str(shim))


class KernelFault(_KernelFault):
    """The twin caught the kernel doing what the NPU would get wrong or hang on."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.kind = message[1 : message.index("]")] if message.startswith("[") else "fault"


class KernelBuildError(BuildError):
    """The kernel source did not compile against the twin (the compiler's message follows)."""


def _sources() -> list[Path]:
    root = Path(str(resources.files("kernel")))
    files = sorted((root / "cpu").glob("*.h")) + sorted((root / "cpu").glob("*.cpp"))
    files += sorted((root / "op_kernel").glob("*.h")) + sorted((root / "op_kernel").glob("*.cpp"))
    return [*files, TILING_HEADER]  # the struct the kernel shares with the host (tiling_model/include)


def cache_dir() -> Path:
    return Path(os.environ.get("BCETUNE_CACHE_DIR") or Path.home() / ".cache" / "bcetune")


def source_hash(cxx: str, extra: tuple[str, ...] = ()) -> str:
    """Hash of every source the twin library is built from, the compiler and the flags."""
    h = hashlib.sha256()
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True, check=False).stdout
    h.update(version.encode())
    h.update(" ".join(CXXFLAGS + tuple(Path(x).name if x.endswith(".h") else x for x in extra)).encode())
    for f in _sources():
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def build_once(path: Path, build: Callable[[Path], None]) -> Path:
    """``path`` if it exists, else ``build(tmp)`` into a temporary file beside it, moved into place
    atomically (concurrent builders agree on the result; a failed build leaves nothing behind)."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
            tmp_out = Path(tmp) / path.name
            build(tmp_out)
            os.replace(tmp_out, path)
    return path


def compile_twin(entry: Path, out: Path, extra: tuple[str, ...] = ()) -> None:
    """g++ ``entry`` (which includes the kernel and the twin) into the shared library ``out``."""
    cxx = shutil.which(os.environ.get("CXX", "g++"))
    if cxx is None:
        raise KernelBuildError("no C++ compiler: install g++ (or set CXX) to run the kernel on the CPU twin")
    root = Path(str(resources.files("kernel")))
    includes = ["-I", str(root / "cpu"), "-I", str(root / "op_kernel"), "-I", str(TILING_HEADER.parent)]
    cmd = [cxx, *CXXFLAGS, *extra, *includes, str(entry), "-o", str(out)]
    # a first use waits several seconds here: say so (once per build, on stderr; cached after)
    print(f"bcetune: building the CPU twin ({entry.name}, g++, several seconds; cached in {out.parent})",
          file=sys.stderr, flush=True)  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise KernelBuildError(f"compiling {entry.name} against the CPU twin failed:\n{proc.stderr.strip()}")


_lock = threading.Lock()
_libs: dict[tuple[str, str | None], ctypes.CDLL] = {}


def library(flow: str = "launch", dtype: str | None = None) -> ctypes.CDLL:
    """The twin library of one build flow (``op``: of one dtype) for the current sources: built on
    first use, then loaded from the cache."""
    key = (flow, dtype if flow == "op" else None)
    with _lock:
        if key in _libs:
            return _libs[key]
        extra = flow_flags(flow, dtype)
        cxx = shutil.which(os.environ.get("CXX", "g++")) or "g++"
        tag = flow if flow == "launch" else f"op-{dtype}"
        entry = Path(str(resources.files("kernel"))) / "cpu" / "twin_entry.cpp"
        path = build_once(
            cache_dir() / f"bce_grad_twin-{tag}-{source_hash(cxx, extra)}.so",
            lambda out: compile_twin(entry, out, extra),
        )
        lib = ctypes.CDLL(str(path))
        lib.bce_twin_flow.restype = ctypes.c_char_p
        for fn in (lib.bce_twin_run, lib.bce_twin_run_fused):
            fn.restype = ctypes.c_int
            fn.argtypes = _RUN_ARGTYPES
        _libs[key] = lib
        return lib


class _Tensor(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("data", ctypes.c_void_p),
        ("bytes", ctypes.c_uint64),
    ]


class _Stats(ctypes.Structure):
    _fields_ = [("ub_peak", ctypes.c_uint64), ("ub_peak_min", ctypes.c_uint64)]


_RUN_ARGTYPES: list[Any] = [
    ctypes.POINTER(_Tensor),
    ctypes.c_int,
    ctypes.c_int64,
    ctypes.c_int64,
    ctypes.c_int,
    ctypes.POINTER(ctypes.c_int64),
    ctypes.c_int64,
    ctypes.POINTER(_Stats),
    ctypes.POINTER(ctypes.c_uint64),
    ctypes.c_char_p,
    ctypes.c_uint64,
]


@dataclass(frozen=True)
class RunResult:
    """What one launch did: UB the cores allocated, and bytes each GM tensor saw."""

    ub_peak: int
    ub_peak_min: int
    bytes_read: dict[str, int]
    bytes_written: dict[str, int]


@dataclass(frozen=True)
class PreparedTiling:
    """What a launch needs besides the tensors, made once per tiling: the struct's bytes, the block
    count, the workspace size and the UB the cores may use (the PyTorch operator caches these)."""

    tiling: TilingData
    tiling_bytes: np.ndarray
    ub_usable_bytes: int

    @classmethod
    def of(cls, tiling: TilingData) -> PreparedTiling:
        raw = np.frombuffer(tiling.to_bytes(), dtype=np.uint8).copy()
        raw.setflags(write=False)
        return cls(tiling, raw, load_soc(tiling.soc).ub_usable_bytes)


def run_tiling(
    tiling: TilingData | PreparedTiling,
    arrays: dict[str, np.ndarray | None],
    out: np.ndarray,
    *,
    cores: list[int] | None = None,
    threads: int | None = None,
    flow: str = "launch",
) -> RunResult:
    """Launch the kernel with ``tiling`` over contiguous ``arrays`` (grad, logits, labels, weight,
    pos_weight) writing ``out``; ``cores`` limits the run to some block indices; ``flow`` picks the
    CANN build flow the kernel is compiled as (``op``: the custom-op binary of the tiling's dtype)."""
    prepared = tiling if isinstance(tiling, PreparedTiling) else PreparedTiling.of(tiling)
    if prepared.tiling.variant.mode == "fused":
        raise BadRequest("a fused-mode tiling runs through run_fused_tiling (its entry takes no grad)")
    gm = [arrays.get(k) for k in TENSOR_NAMES[:5]] + [out]
    return _launch(prepared, TENSOR_NAMES, gm, "bce_twin_run", cores, threads, flow)


def run_fused_tiling(
    tiling: TilingData | PreparedTiling,
    arrays: dict[str, np.ndarray | None],
    dx: np.ndarray,
    loss: np.ndarray,
    *,
    cores: list[int] | None = None,
    threads: int | None = None,
    flow: str = "launch",
) -> RunResult:
    """Launch the fused entry (bce_with_logits_fused) with a fused-mode ``tiling`` over contiguous ``arrays``
    (logits, labels, weight, pos_weight), writing ``dx`` and ``loss`` (the input's shape for reduction none,
    else one float32 per block index: each core's sum of the loss)."""
    prepared = tiling if isinstance(tiling, PreparedTiling) else PreparedTiling.of(tiling)
    if prepared.tiling.variant.mode != "fused":
        raise BadRequest("run_fused_tiling takes a fused-mode tiling (Variant(..., mode='fused'))")
    gm = [arrays.get(k) for k in FUSED_TENSOR_NAMES[:4]] + [dx, loss]
    return _launch(prepared, FUSED_TENSOR_NAMES, gm, "bce_twin_run_fused", cores, threads, flow)


def _launch(
    prepared: PreparedTiling,
    names: tuple[str, ...],
    gm: list[np.ndarray | None],
    entry: str,
    cores: list[int] | None,
    threads: int | None,
    flow: str,
) -> RunResult:
    """One launch of a twin entry: ``gm`` are its first six GM arguments (``names`` order), then the workspace
    and the tiling struct are added."""
    t = prepared.tiling
    bad = [c for c in cores or [] if not 0 <= c < t.block_dim]
    if bad:
        raise BadRequest(f"cores {bad} are not block indices of this tiling (0..{t.block_dim - 1})")
    if t.block_dim == 0:
        return RunResult(0, 0, dict.fromkeys(names, 0), dict.fromkeys(names, 0))
    workspace = np.zeros(max(t.workspace_bytes, 0), dtype=np.uint8)
    # the kernel never writes the tiling; the twin's view of it is read-only memory in all but name
    keep = [*gm, workspace if workspace.size else None, prepared.tiling_bytes]
    tensors = _gm_tensors(keep, names)  # keep holds the arrays alive while the kernel runs
    which = (ctypes.c_int64 * max(len(cores or []), 1))(*(cores or [0]))
    stats = _Stats()
    io = (ctypes.c_uint64 * 16)()
    err = ctypes.create_string_buffer(2048)
    rc = getattr(library(flow, t.variant.dtype), entry)(
        tensors,
        8,
        t.block_dim,
        prepared.ub_usable_bytes,
        threads or _THREADS,
        which,
        len(cores or []),
        ctypes.byref(stats),
        io,
        err,
        len(err),
    )
    if rc != 0:
        raise KernelFault(err.value.decode(errors="replace"))
    return RunResult(
        int(stats.ub_peak),
        int(stats.ub_peak_min),
        {n: int(io[2 * i]) for i, n in enumerate(names)},
        {n: int(io[2 * i + 1]) for i, n in enumerate(names)},
    )


_THREADS = os.cpu_count() or 1


def _gm_tensors(arrays: list[np.ndarray | None], names: tuple[str, ...] = TENSOR_NAMES) -> ctypes.Array[_Tensor]:
    """The launcher's view of the eight GM arguments (in ``names`` order); absent ones are null."""
    tensors = (_Tensor * len(names))()
    for i, (name, a) in enumerate(zip(names, arrays, strict=True)):
        if a is not None and not a.flags.c_contiguous:
            raise BadRequest(f"{name} must be C-contiguous")
        tensors[i].name = name.encode()
        tensors[i].data = a.ctypes.data if a is not None and a.size else None
        tensors[i].bytes = a.nbytes if a is not None else 0
    return tensors


def dtype_name(a: np.ndarray) -> str:
    for name, dt in DTYPES.items():
        if a.dtype == dt:
            return name
    raise BadRequest(f"unsupported dtype {a.dtype}; the kernel takes {', '.join(DTYPES)}")


def _check_inputs(
    grad: np.ndarray,
    p: np.ndarray,
    y: np.ndarray,
    weight: np.ndarray | None,
    pos_weight: np.ndarray | None,
    reduction: str,
) -> tuple[str, Broadcast, Broadcast]:
    """Validate shapes and dtypes as the operator defines them; returns (dtype, weight's and
    pos_weight's broadcast forms: any shape PyTorch broadcasts, see tiling_model.broadcast_of)."""
    dtype = dtype_name(p)
    for name, a in (("y", y), ("grad", grad), ("weight", weight), ("pos_weight", pos_weight)):
        if a is not None and a.dtype != p.dtype:
            raise BadRequest(f"{name} is {a.dtype} but p is {p.dtype}: all inputs share one dtype")
    if y.shape != p.shape:
        raise BadRequest(f"y shape {y.shape} differs from p shape {p.shape}")
    if reduction == "none":
        if grad.shape != p.shape:
            raise BadRequest(f"reduction='none' needs grad of the input's shape {p.shape}, got {grad.shape}")
    elif grad.size != 1:
        raise BadRequest(f"reduction={reduction!r} takes one scalar grad, got shape {grad.shape}")
    w = broadcast_of("weight", None if weight is None else weight.shape, p.shape)
    pw = pos_weight_of(None if pos_weight is None else pos_weight.shape, p.shape)
    return dtype, w, pw


def bce_grad(
    grad: np.ndarray,
    p: np.ndarray,
    y: np.ndarray,
    weight: np.ndarray | None = None,
    pos_weight: np.ndarray | None = None,
    *,
    reduction: str = "none",
    wrt: str = "logit",
    soc: str = "Ascend910B2",
    params: TilingParams | None = None,
    scheme: str = "exact",
    cores: list[int] | None = None,
    flow: str = "launch",
) -> np.ndarray:
    """z for one BinaryCrossEntropyGrad call, computed by the real kernel source in the twin.

    The tiling comes from ``tiling_model.compute_tiling`` (``params`` fixes knobs); a twin fault
    raises :class:`KernelFault`, bad input ``BadRequest`` (a ValueError). ``cores`` runs only those block
    indices (the rest of z stays zero): for checking tilings of tensors too big to run whole.
    ``flow`` builds the kernel as the kernel-launch library (default) or the custom-op package.
    """
    g, p, y = np.ascontiguousarray(grad), np.ascontiguousarray(p), np.ascontiguousarray(y)
    w = None if weight is None else np.ascontiguousarray(weight)
    pw = None if pos_weight is None else np.ascontiguousarray(pos_weight)
    dtype, w_form, pw_form = _check_inputs(g, p, y, w, pw, reduction)
    # the kernel's GM tensors keep the requirement's names (see kernel/__init__.py)
    arrays: dict[str, np.ndarray | None] = {"grad": g, "logits": p, "labels": y, "weight": w, "pos_weight": pw}
    variant = Variant(dtype, reduction, w_form.form, pw_form.form, wrt)  # type: ignore[arg-type]
    tiling = compute_tiling(list(p.shape), variant, params, soc, scheme, w_form.period)  # type: ignore[arg-type]
    out = np.zeros(p.shape, dtype=p.dtype)
    run_tiling(tiling, arrays, out, cores=cores, flow=flow)
    return out


def bce_with_logits_fused(
    x: np.ndarray,
    y: np.ndarray,
    weight: np.ndarray | None = None,
    pos_weight: np.ndarray | None = None,
    *,
    reduction: str = "mean",
    soc: str = "Ascend910B2",
    params: TilingParams | None = None,
    cores: list[int] | None = None,
    flow: str = "launch",
) -> tuple[np.ndarray, np.ndarray]:
    """(loss, dx) of BCEWithLogits, computed by the kernel's fused mode in the twin: the loss as PyTorch
    returns it (the input's shape for none; a 0-dim array of the input's dtype for sum and mean: the cores'
    float32 sums added in block order, in float64, then / N for mean) and dx = d loss / d x at grad_output 1.
    Float dtypes; weight in any broadcast form, pos_weight full or [C]."""
    x, y = np.ascontiguousarray(x), np.ascontiguousarray(y)
    w = None if weight is None else np.ascontiguousarray(weight)
    pw = None if pos_weight is None else np.ascontiguousarray(pos_weight)
    dtype, w_form, pw_form = _check_inputs(np.zeros(1, x.dtype), x, y, w, pw, "sum")
    variant = Variant(dtype, reduction, w_form.form, pw_form.form, "logit", "fused")  # type: ignore[arg-type]
    tiling = compute_tiling(list(x.shape), variant, params, soc, "exact", w_form.period)
    dx = np.zeros(x.shape, dtype=x.dtype)
    none = reduction == "none"
    loss = np.zeros(x.shape if none else (max(tiling.block_dim, 1),), dtype=x.dtype if none else np.float32)
    arrays: dict[str, np.ndarray | None] = {"logits": x, "labels": y, "weight": w, "pos_weight": pw}
    run_fused_tiling(tiling, arrays, dx, loss, cores=cores, flow=flow)
    if none:
        return loss, dx
    total = 0.0
    for part in loss.tolist():  # in block order: the same sum run to run
        total += part
    if reduction == "mean":
        total = total / x.size if x.size else float("nan")
    return np.asarray(total, dtype=x.dtype), dx


__all__ = [
    "FLOWS",
    "KernelBuildError",
    "KernelFault",
    "PreparedTiling",
    "RunResult",
    "bce_grad",
    "bce_with_logits_fused",
    "library",
    "run_fused_tiling",
    "run_tiling",
]
