"""Host work per call of ``torch.ops.bcetune.bce_grad`` on the CPU, side by side in one run with a plain
torch elementwise op on the same tensors.

What is timed (medians over repeated batches, microseconds per call):

- ``torch.sub``: a plain elementwise op (the floor any op call pays: dispatch + allocation + a tiny loop);
- ``empty op``: the operator's schema with a body that returns ``torch.empty_like``, registered as the
  operator is (``torch.library`` define/impl): what dispatching to a Python kernel costs;
- ``custom_op``: the same through ``torch.library.custom_op`` (its Python autograd layer runs on every
  call: why the operator uses define/impl);
- ``tiling cache hit``: ``kernel.torch_op.resolved`` for a key already cached (the per-call tiling work);
- ``twin run``: the kernel in the CPU twin with a prepared tiling (``kernel.cpu.run_tiling``), no op around it;
- ``bce_grad op``: the whole call (dispatch, the cache hit, numpy views, the twin run);
- ``host``: the whole call with the twin run replaced by a no-op (dispatch, the cache hit, the output's
  allocation and the numpy views: what the operator adds around the kernel; on the NPU the same
  dispatch and a device-buffer cache hit in C++ come before an asynchronous launch).

Run: ``make bench-torch-op`` (or ``.venv/bin/python benchmarks/torch_op_overhead.py``). No thresholds: this
machine is shared and noisy; read the ratios, measured in the same run.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")  # torch_npu installed without CANN (see tests/conftest.py)

import torch  # noqa: E402

from kernel import cpu as twin  # noqa: E402
from kernel import torch_op  # noqa: E402


def _empty(*args: object) -> torch.Tensor:
    return torch.empty_like(args[1])  # type: ignore[arg-type]


# the operator's schema with an empty body, through the two torch.library APIs
_LIB = torch.library.Library("bcetune_bench", "DEF")  # noqa: TOR901
_LIB.define("empty" + torch_op.SCHEMA)
_LIB.impl("empty", _empty, "CPU")
torch.library.custom_op("bcetune_bench::custom", _empty, mutates_args=(), device_types="cpu", schema=torch_op.SCHEMA)


def per_call_us(fn: Callable[[], object], calls: int = 200, batches: int = 15) -> float:
    for _ in range(calls // 4):
        fn()
    times = []
    for _ in range(batches):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t0) / calls)
    return statistics.median(times) * 1e6


def main() -> None:
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, CPU twin of {torch_op.cpu_soc()}; microseconds per call, median of 15 batches")
    print(f"{'n':>9} {'torch.sub':>10} {'empty op':>9} {'custom_op':>10} {'cache hit':>10} {'twin run':>9} "
          f"{'bce_grad':>9} {'host':>8} {'host/sub':>9}")  # fmt: skip
    for n in (1024, 16384, 262144):
        row(n)
    print("host: bce_grad with the twin run replaced by a no-op (dispatch, tiling-cache hit, output, numpy views)")
    print(f"tiling cache: {torch_op.cache_info()}")


def row(n: int) -> None:
    g, p, y = torch.randn(n), torch.rand(n), torch.rand(n)
    shapes, dtypes = ((n,), (n,), (n,), None, None), ("float32", "float32", "float32", "", "")
    key = (torch_op.cpu_soc(), torch_op.tables_dir(), shapes, dtypes, "none", "logit")
    op = torch_op.resolved(*key)
    arrays = {"grad": g.numpy(), "logits": p.numpy(), "labels": y.numpy(), "weight": None, "pos_weight": None}
    out = torch.empty(n).numpy()
    sub = per_call_us(lambda: torch.sub(p, y))
    args = (g, p, y, None, None, "none", "logit")
    empty = per_call_us(lambda: torch.ops.bcetune_bench.empty(*args))
    custom = per_call_us(lambda: torch.ops.bcetune_bench.custom(*args))
    hit = per_call_us(lambda: torch_op.resolved(*key))
    run = per_call_us(lambda: twin.run_tiling(op.prepared, arrays, out))
    call = lambda: torch.ops.bcetune.bce_grad(g, p, y, None, None, "none", "logit")  # noqa: E731
    full = per_call_us(call)
    real_run = twin.run_tiling
    twin.run_tiling = lambda *a, **k: None  # type: ignore[assignment]  # the op's own work only
    try:
        host = per_call_us(call)
    finally:
        twin.run_tiling = real_run
    print(f"{n:>9} {sub:>10.1f} {empty:>9.1f} {custom:>10.1f} {hit:>10.2f} {run:>9.1f} {full:>9.1f} {host:>8.1f} "
          f"{host / sub:>8.1f}x")  # fmt: skip


if __name__ == "__main__":
    main()
