"""The torch_npu runner: launch the compiled kernel on an Ascend NPU and time it.

Needs CANN, torch, torch_npu and the extension that ``kernel/build.sh --launch-lib`` builds
(found at ``$BCETUNE_NPU_EXT`` or ``kernel/build/launch/``). The tiling comes from
``tiling_model`` and travels to the device as the struct's bytes. Without an NPU every entry
point raises :class:`NpuUnavailable` with one line saying what is missing.

NOT RUN on bcetune's CI (no NPU there): the same kernel source is verified on the CPU twin, the
extension is compiled against the real torch and torch_npu headers (tests/kernel/test_npu_ext.py), and
``python -m kernel.doctor`` is what a user with an Ascend host runs first.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tiling_model import BadRequest, BuildError, TilingData, TilingParams, Variant, compute_tiling
from tiling_model.variant import broadcast_of, pos_weight_of

#: Written between timed repetitions to evict the kernel's data from L2 (A2 L2 is 192 MiB at most).
L2_FLUSH_BYTES = 256 * 1024 * 1024
TORCH_DTYPES = ("float32", "float16", "bfloat16", "int32", "int16")


class NpuUnavailable(BuildError):
    """No NPU path on this machine (torch_npu, a device, or the built extension is missing)."""


@dataclass(frozen=True)
class NpuRuntime:
    torch: Any
    ext: Any
    soc: str


def extension_path() -> Path:
    env = os.environ.get("BCETUNE_NPU_EXT")
    if env:
        return Path(env)
    found = sorted((Path(__file__).parent / "build" / "launch").glob("bce_grad_npu*.so"))
    return found[0] if found else Path(__file__).parent / "build" / "launch" / "bce_grad_npu.so"


_load_error: str | None = None


def load_torch_npu() -> Any:
    """torch with torch_npu loaded, or NpuUnavailable saying which piece is missing.

    torch_npu registers itself as a torch device backend, so once it is installed even a plain
    ``import torch`` loads it and fails where CANN's libraries are missing (a CPU-only user of
    such an environment sets TORCH_DEVICE_BACKEND_AUTOLOAD=0)."""
    if importlib.util.find_spec("torch_npu") is None:
        raise NpuUnavailable(
            "torch_npu is not installed (pip install 'bcetune[npu]' on a machine with CANN and an NPU)"
        )
    global _load_error
    if _load_error is None:  # a failed import is not retried: a second attempt fails on half-registered state
        try:
            import torch
            import torch_npu  # noqa: F401  (registers the NPU device with torch)

            return torch
        except (ImportError, OSError, RuntimeError) as e:
            cause = e.__cause__ or e.__context__ or e
            _load_error = (str(cause).strip().splitlines() or [type(cause).__name__])[0]
    raise NpuUnavailable(
        f"torch_npu is installed but cannot load ({_load_error}): install CANN and source its set_env.sh"
    )


def runtime(device: int | None = None) -> NpuRuntime:
    """torch with torch_npu, the launch extension and the device's SoC name, or NpuUnavailable.
    ``device``: the NPU this process uses (one sweep worker per device: ``--device N``)."""
    torch = load_torch_npu()
    if not torch.npu.is_available():
        raise NpuUnavailable("torch_npu found no NPU device (check npu-smi info and the CANN driver)")
    if device is not None:
        count = int(torch.npu.device_count())
        if not 0 <= device < count:
            raise NpuUnavailable(f"--device {device}: this host has {count} NPU(s), 0..{count - 1}")
        torch.npu.set_device(device)
    path = extension_path()
    if not path.exists():
        raise NpuUnavailable(f"the kernel extension {path} is not built: run kernel/build.sh --launch-lib")
    spec = importlib.util.spec_from_file_location("bce_grad_npu", path)
    if spec is None or spec.loader is None:
        raise NpuUnavailable(f"cannot load the kernel extension {path}")
    ext = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ext)
    return NpuRuntime(torch, ext, str(torch.npu.get_device_name()))


def device_tiling(rt: NpuRuntime, tiling: TilingData) -> tuple[Any, Any]:
    """The struct's bytes and the workspace on the device (prepared once, outside timed regions)."""
    torch = rt.torch
    raw = torch.frombuffer(bytearray(tiling.to_bytes()), dtype=torch.uint8).npu()
    ws = torch.zeros(tiling.workspace_bytes, dtype=torch.uint8).npu() if tiling.workspace_bytes else None
    return raw, ws


def launch(rt: NpuRuntime, tiling: TilingData, dev: tuple[Any, Any], tensors: dict[str, Any], z: Any) -> None:
    """Enqueue one launch of ``tiling`` over NPU tensors (grad, logits, labels, weight, pos_weight)."""
    if tiling.block_dim == 0:
        return
    raw, ws = dev
    rt.ext.launch(
        tiling.block_dim,
        tensors["grad"],
        tensors["logits"],
        tensors["labels"],
        tensors.get("weight"),
        tensors.get("pos_weight"),
        z,
        ws,
        raw,
    )


def bce_grad(
    grad: Any,
    p: Any,
    y: Any,
    weight: Any = None,
    pos_weight: Any = None,
    *,
    reduction: str = "none",
    wrt: str = "logit",
    params: TilingParams | None = None,
) -> Any:
    """z on the NPU for torch tensors already on the device (contiguous, one dtype); ``p`` and ``y``
    are the requirement's ``logits`` and ``labels``."""
    rt = runtime()
    dtype = str(p.dtype).removeprefix("torch.")
    if dtype not in TORCH_DTYPES:
        raise BadRequest(f"unsupported dtype {dtype}; the kernel takes {', '.join(TORCH_DTYPES)}")
    shape = tuple(p.shape)
    w = broadcast_of("weight", None if weight is None else tuple(weight.shape), shape)  # any broadcastable shape
    pw = pos_weight_of(None if pos_weight is None else tuple(pos_weight.shape), shape)
    variant = Variant(dtype, reduction, w.form, pw.form, wrt)  # type: ignore[arg-type]
    tiling = compute_tiling(list(shape), variant, params, rt.soc, "exact", w.period or None)
    if tiling.block_dim == 0:  # an empty tensor: nothing to launch
        return rt.torch.empty_like(p)
    z = rt.torch.empty_like(p)
    tensors = {"grad": grad, "logits": p, "labels": y, "weight": weight, "pos_weight": pos_weight}
    dev = device_tiling(rt, tiling)
    launch(rt, tiling, dev, {k: (None if v is None else v.contiguous()) for k, v in tensors.items()}, z)
    return z


def time_launches(
    rt: NpuRuntime, tiling: TilingData, tensors: dict[str, Any], warmup: int, repeats: int, flush_l2: bool
) -> list[float]:
    """Kernel times in microseconds by torch.npu.Event: ``warmup`` untimed launches, then
    ``repeats`` timed ones, each after an L2 flush when asked (a write larger than L2)."""
    torch = rt.torch
    z = torch.empty_like(tensors["logits"])
    flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.uint8, device=z.device) if flush_l2 else None
    dev = device_tiling(rt, tiling)
    for _ in range(warmup):
        launch(rt, tiling, dev, tensors, z)
    torch.npu.synchronize()
    samples = []
    for _ in range(repeats):
        if flush is not None:
            flush.zero_()
        start = torch.npu.Event(enable_timing=True)
        end = torch.npu.Event(enable_timing=True)
        start.record()
        launch(rt, tiling, dev, tensors, z)
        end.record()
        torch.npu.synchronize()
        samples.append(float(start.elapsed_time(end)) * 1000.0)  # ms -> us
    return samples


__all__ = ["NpuUnavailable", "bce_grad", "launch", "load_torch_npu", "runtime", "time_launches"]
