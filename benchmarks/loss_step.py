"""A training step's BCEWithLogits loss (forward + backward) on each path, side by side in one run.

For N x C from 1 Ki to 256 Mi elements, each dtype and weight form, each reduction, grad_output 1 (``loss.backward()``;
for ``none`` ``loss.sum().backward()``) and a scaled one:

- **HBM bytes per element**, counted from what each kernel reads and writes. Traced paths run under a
  ``TorchDispatchMode`` on meta tensors (any size, no memory) and count every dispatched op as one kernel that
  reads its tensor operands' storage and writes its outputs (views move nothing):
  ``PyTorch op by op`` (ATen's decomposition of the forward and autograd's backward formula: eager on a device
  without a fused loss), ``bcetune before`` (this repository before issue 39:
  PyTorch's forward, a sigmoid saved for backward, the bce_grad kernel; ``losses._WithLogits``, traced in the
  twin), ``bcetune fused`` (one call: reads x, y and the weights as given, writes the gradient, and the loss for
  ``none``; the native kernel on the CPU, the kernel's fused mode on an NPU). Counted from rules, from the
  sources named: ``PyTorch, one kernel each way``
  (the issue's reference: a forward reading x, y; a backward reading x, y, grad_output, writing dx),
  ``torch_npu`` (op-plugin calls aclnnBinaryCrossEntropyWithLogits / ...Backward; ops-nn's op_api builds an
  all-ones pos_weight in forward and all-ones weight and pos_weight in backward where absent, runs the forward
  at reduction none and reduces after), and ``floor`` (read x and y once, write dx once).
- **kept for backward**: the bytes of the tensors autograd saves, in input-sized tensors (measured on the CPU
  with ``saved_tensors_hooks``).
- **predicted device time** (``--soc``, Ascend910B2): the cost model's engine. ``before``: the bce_grad kernel
  at the tiling the operator resolves, plus PyTorch's forward (as torch_npu runs it) and the sigmoid modelled
  as generic elementwise kernels at their best tilings; ``fused``: the kernel's fused mode
  (``bce_with_logits_fused``: its UB plan and instruction list, as the twin runs it) at the model's best tiling
  (what the tables' fused entries are tuned on), plus a multiply when grad_output is not 1. A model: no NPU
  has run either.
- **CPU wall time** of the step against PyTorch's own (sizes up to ``--cpu-max``, medians of interleaved runs).

Run: ``make bench-loss`` (``python benchmarks/loss_step.py``). Prints what it measured; asserts nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch._decomp import decomposition_table
from torch.utils._python_dispatch import TorchDispatchMode

from kernel import torch_op
from kernel.torch_op import losses
from kernel.torch_op.tilings import resolved, tables_dir
from tiling_model import Variant, load_soc, predict_detail
from tiling_model.kernels import elementwise_kernel
from tiling_model.pick import _best_params, model_best
from tiling_model.tiling import tile_kernel

aten = torch.ops.aten
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
SIZES = [1 << k for k in range(10, 29, 2)]  # 1 Ki .. 256 Mi elements
C = 1024
#: weight / pos_weight forms: (name, weight shape, pos_weight shape) for an [N, C] input
FORMS = {
    "none": (None, None),
    "w[C] pw[C]": ((C,), (C,)),
    "w full": ("full", None),
}


def _storage_bytes(t: torch.Tensor) -> int:
    """What reading ``t`` costs once: its distinct elements (a broadcast [C] weight is C, not N x C)."""
    distinct = t.numel() if all(s != 0 for s in t.stride()) else t.untyped_storage().nbytes() // t.element_size()
    return min(t.numel(), distinct) * t.element_size()


class Traffic(TorchDispatchMode):
    """Every dispatched op as a kernel: the bytes it reads (its tensor operands) and writes (its outputs)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple[str, int, int]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        ins = [a for a in torch.utils._pytree.tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
        outs = [o for o in torch.utils._pytree.tree_leaves(out) if isinstance(o, torch.Tensor)]
        in_place = str(func.overloadpacket).endswith("_")
        if outs and not in_place and all(any(_aliases(o, i) for i in ins) for o in outs):
            return out  # a view: no kernel
        read = sum(_storage_bytes(t) for t in {id(t): t for t in ins}.values())
        written = sum(o.numel() * o.element_size() for o in outs)
        self.ops.append((str(func.overloadpacket), read, written))
        return out

    @property
    def bytes(self) -> int:
        return sum(r + w for _, r, w in self.ops)


def _aliases(a: torch.Tensor, b: torch.Tensor) -> bool:
    try:
        return a.untyped_storage()._cdata == b.untyped_storage()._cdata
    except (RuntimeError, NotImplementedError):
        return False


@dataclass
class Case:
    n: int
    dtype: str
    form: str
    reduction: str
    scaled: bool  # grad_output not 1: 0.5 for sum / mean, a random full tensor for none

    @property
    def shape(self) -> tuple[int, int]:
        return (max(1, self.n // C), C)

    def tensors(self, device: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        dt = DTYPES[self.dtype]
        w_shape, pw_shape = FORMS[self.form]
        make = (lambda s: torch.empty(s, dtype=dt, device="meta")) if device == "meta" else (
            lambda s: torch.rand(s, dtype=dt) + 0.5)  # fmt: skip
        x = torch.randn(self.shape, dtype=dt) if device != "meta" else make(self.shape)
        y = (torch.rand(self.shape) < 0.3).to(dt) if device != "meta" else make(self.shape)
        w = None if w_shape is None else make(self.shape if w_shape == "full" else w_shape)
        pw = None if pw_shape is None else make(pw_shape)
        return x, y, w, pw

    def grad_output(self, device: str) -> torch.Tensor:
        """1: ``loss.backward()``, or for ``none`` what ``loss.sum()`` hands back (a 1 expanded to the loss's
        shape); scaled: 0.5, or for ``none`` a full tensor (a mask, a per-sample weight)."""
        dt = DTYPES[self.dtype]
        if self.reduction != "none":
            return torch.tensor(0.5 if self.scaled else 1.0, dtype=dt, device=device)
        if self.scaled:
            return torch.full(self.shape, 0.5, dtype=dt, device=device)
        return torch.ones((), dtype=dt, device=device).expand(self.shape)


def step(loss_fn: Callable[..., torch.Tensor], grad_output: torch.Tensor, x: torch.Tensor, *rest: Any) -> None:
    """Forward and backward of one step's loss, with the grad_output of ``Case.grad_output`` (made before
    any counting starts: it is the caller's, not the loss's)."""
    loss_fn(x, *rest).backward(grad_output)


def _loss(case: Case) -> Callable[..., torch.Tensor]:
    return lambda x, y, w, pw: torch_op.binary_cross_entropy_with_logits(x, y, w, reduction=case.reduction,
                                                                         pos_weight=pw)  # fmt: skip


def _before(case: Case) -> Callable[..., torch.Tensor]:
    """bcetune before issue 39: PyTorch's forward, a sigmoid saved for backward, the bce_grad kernel (the twin)."""
    return lambda x, y, w, pw: losses._WithLogits.apply(x, y, w, pw, case.reduction)


def _pytorch(case: Case) -> Callable[..., torch.Tensor]:
    return lambda x, y, w, pw: F.binary_cross_entropy_with_logits(x, y, w, reduction=case.reduction, pos_weight=pw)


@contextlib.contextmanager
def cpu_loss(kind: str, any_size: bool = False) -> Iterator[None]:
    """The losses' CPU path; ``any_size``: the fused call at every size (its bytes and memory traced on small
    tensors, which the default would give to PyTorch's own below ``FUSED_MIN_ELEMENTS``)."""
    before, crossover = os.environ.get("BCETUNE_CPU_LOSS"), losses.FUSED_MIN_ELEMENTS
    os.environ["BCETUNE_CPU_LOSS"] = kind
    if any_size:
        losses.FUSED_MIN_ELEMENTS = 0
    try:
        yield
    finally:
        losses.FUSED_MIN_ELEMENTS = crossover
        if before is None:
            del os.environ["BCETUNE_CPU_LOSS"]
        else:
            os.environ["BCETUNE_CPU_LOSS"] = before


def traced(case: Case, path: str) -> Traffic:
    """The ops of one step on meta tensors (bcetune's paths trace on the CPU's dispatch: meta has no twin)."""
    x, y, w, pw = case.tensors("meta")
    x.requires_grad_()
    g = case.grad_output("meta")
    mode = Traffic()
    if path == "pytorch":
        with mode:
            step(_pytorch(case), g, x, y, w, pw)
        fwd = [i for i, (name, _, _) in enumerate(mode.ops) if name == "aten.binary_cross_entropy_with_logits"]
        decomposed = Traffic()
        with decomposed, torch.no_grad():
            reduction = {"none": 0, "mean": 1, "sum": 2}[case.reduction]
            decomposition_table[aten.binary_cross_entropy_with_logits.default](x.detach(), y, w, pw, reduction)
        mode.ops[fwd[0] : fwd[0] + 1] = decomposed.ops
        return mode
    raise ValueError(path)


def bcetune_traffic(case: Case, path: str) -> Traffic:
    """bcetune's paths: traced on small real CPU tensors of the case's row length, then scaled to the case's
    size per op (every op here is elementwise over the input or over a [C] / scalar operand)."""
    small = Case(C * 16, case.dtype, case.form, case.reduction, case.scaled)  # 16 rows: [C] parts stay apart
    x, y, w, pw = small.tensors("cpu")
    x.requires_grad_()
    g = small.grad_output("cpu")
    mode = Traffic()
    with cpu_loss("twin" if path == "before" else "fast", any_size=True), mode:
        step(_before(small) if path == "before" else _loss(small), g, x, y, w, pw)
    k = case.shape[0] / small.shape[0]
    full = small.n * DTYPES[case.dtype].itemsize

    def scaled(b: int) -> int:  # an input-sized part grows with N; a [C] or scalar part does not
        big = (b // full) * full
        return int(big * k + (b - big))

    out = Traffic()
    out.ops = [(name, scaled(r), scaled(w_)) for name, r, w_ in mode.ops]
    return out


def rule_bytes(case: Case, path: str) -> int:
    """Bytes by rule: PyTorch one kernel each way, torch_npu's aclnn path, the floor."""
    e = DTYPES[case.dtype].itemsize
    n = case.shape[0] * C
    w_shape, pw_shape = FORMS[case.form]
    w = 0 if w_shape is None else (n if w_shape == "full" else C)
    pw = 0 if pw_shape is None else (n if pw_shape == "full" else C)
    loss_out = n if case.reduction == "none" else 1
    g = n if case.reduction == "none" and case.scaled else 1
    if path == "floor":
        return 3 * n * e
    if path == "pytorch 1+1":
        return e * ((2 * n + w + pw + loss_out) + (2 * n + w + pw + g + n))
    if path == "torch_npu":
        fwd_pw = pw if pw_shape is not None else 2 * n  # OnesLike writes it, the kernel reads it
        fwd = 2 * n + w + fwd_pw + n + (n + 1 if case.reduction != "none" else 0)  # none-loss, then reduce
        bwd_w = w if w_shape is not None else 2 * n
        bwd_pw = pw if pw_shape is not None else 2 * n
        bwd = g + 2 * n + bwd_w + bwd_pw + n
        return e * (fwd + bwd)
    raise ValueError(path)


def kept(case: Case, path: str) -> float:
    """Bytes autograd saves for backward, in input-sized tensors (CPU, a small case of the same form)."""
    small = Case(C * 8, case.dtype, case.form, case.reduction, case.scaled)
    x, y, w, pw = small.tensors("cpu")
    x.requires_grad_()
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        seen[t.untyped_storage().data_ptr()] = _storage_bytes(t)
        return t

    fn = {"pytorch": _pytorch, "before": _before}.get(path, _loss)(small)
    with (
        cpu_loss("twin" if path == "before" else "fast", any_size=True),
        torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t),
    ):
        fn(x, y, w, pw)
    return sum(seen.values()) / (small.n * x.element_size())


# --- the cost model ------------------------------------------------------------------------------------

#: Vector instructions per element (MSKPP table names), float32 work.
SIGMOID = ["muls", "exp", "adds", "rec"]
#: torch_npu's forward kernel (SigmoidCrossEntropyWithLogitsV2 at reduction none): a stable softplus and the
#: weighted sum; then a reduce over its output for sum / mean
BCE_FORWARD = ["abs", "muls", "exp", "adds", "ln", "mins", "sub", "adds", "mul", "adds", "mul", "mul", "sub", "add"]


def _generic_us(soc_name: str, dtype: str, n: int, inputs: int, outputs: int, ops: list[str]) -> float:
    soc = load_soc(soc_name)
    k = elementwise_kernel(dtype, inputs, outputs, ops)
    params = _best_params(k, soc, n, None, None)
    assert params is not None
    return predict_detail(tile_kernel(k, [n], params, soc)).predicted_us


def predicted_us(case: Case, path: str, soc: str) -> float:
    n = case.shape[0] * C
    w_full = FORMS[case.form][0] == "full"
    if path == "fused":  # the kernel's fused mode at the model's best tiling
        w_shape, pw_shape = FORMS[case.form]
        weight = "none" if w_shape is None else ("full" if w_shape == "full" else "last_dim")
        variant = Variant(case.dtype, case.reduction, weight, "none" if pw_shape is None else "last_dim",  # type: ignore[arg-type]
                          "logit", "fused")  # fmt: skip
        us = predict_detail(model_best(n, variant, load_soc(soc), C, C if weight == "last_dim" else 0)).predicted_us
        if case.scaled:
            us += _generic_us(soc, case.dtype, n, 1 + int(case.reduction == "none"), 1, ["mul"])
        return us
    # before: PyTorch's forward as torch_npu runs it, a sigmoid, the bce_grad kernel at the operator's tiling
    pw_ones = FORMS[case.form][1] is None
    us = _generic_us(soc, case.dtype, n, 1, 1, ["duplicate"]) if pw_ones else 0.0
    us += _generic_us(soc, case.dtype, n, 2 + int(w_full) + int(pw_ones), 1, BCE_FORWARD)
    if case.reduction != "none":
        us += _generic_us(soc, case.dtype, n, 1, 1, ["add"])  # the reduce: a read of the loss
    us += _generic_us(soc, case.dtype, n, 1, 1, SIGMOID)
    w_shape, pw_shape = FORMS[case.form]
    shape = case.shape
    shapes = (shape if case.reduction == "none" else (), shape, shape,
              None if w_shape is None else (shape if w_shape == "full" else w_shape), pw_shape)  # fmt: skip
    dtypes = (case.dtype,) * 3 + tuple("" if s is None else case.dtype for s in shapes[3:])
    op = resolved(soc, tables_dir(), shapes, dtypes, case.reduction, "logit")
    return us + predict_detail(op.tiling).predicted_us


# --- CPU time ------------------------------------------------------------------------------------------


SMALL_REPEATS = 201


def cpu_ms(case: Case, repeats: int) -> tuple[float, float]:
    """Medians of interleaved steps (ms): PyTorch's own, bcetune's default CPU path (under 1 Mi elements at
    least ``SMALL_REPEATS``: a step of tens of microseconds moves by more than the difference between runs)."""
    x, y, w, pw = case.tensors("cpu")
    repeats = repeats if x.numel() >= 1 << 20 else max(repeats, SMALL_REPEATS)
    x.requires_grad_()
    g = case.grad_output("cpu")
    ours, theirs = _loss(case), _pytorch(case)
    times: dict[str, list[float]] = {"pytorch": [], "fused": []}
    with cpu_loss("fast"):
        for i in range(repeats + 2):
            for name, fn in (("pytorch", theirs), ("fused", ours)) if i % 2 else (("fused", ours), ("pytorch", theirs)):
                x.grad = None
                t0 = time.perf_counter()
                step(fn, g, x, y, w, pw)
                if i >= 2:  # two warm-up rounds
                    times[name].append(time.perf_counter() - t0)
    return statistics.median(times["pytorch"]) * 1e3, statistics.median(times["fused"]) * 1e3


@dataclass
class Row:
    case: Case
    bytes: dict[str, float] = field(default_factory=dict)  # per element
    kept: dict[str, float] = field(default_factory=dict)
    us: dict[str, float] = field(default_factory=dict)
    cpu: tuple[float, float] | None = None


def measure(case: Case, soc: str, cpu_max: int, repeats: int) -> Row:
    row = Row(case)
    n = case.shape[0] * C
    row.bytes["pytorch ops"] = traced(case, "pytorch").bytes / n
    for path in ("pytorch 1+1", "torch_npu", "floor"):
        row.bytes[path] = rule_bytes(case, path) / n
    row.bytes["before"] = bcetune_traffic(case, "before").bytes / n
    row.bytes["fused"] = bcetune_traffic(case, "fused").bytes / n
    for path in ("pytorch", "before", "fused"):
        row.kept[path] = kept(case, path)
    for path in ("before", "fused"):
        row.us[path] = predicted_us(case, path, soc)
    if n <= cpu_max:
        row.cpu = cpu_ms(case, repeats)
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--soc", default="Ascend910B2")
    ap.add_argument("--cpu-max", type=int, default=16 << 20, help="largest size timed on the CPU (elements)")
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--quick", action="store_true", help="1 Mi elements, float32 (the tests' run)")
    ap.add_argument("--json", type=Path, help="also write every row's figures here")
    a = ap.parse_args(argv)
    sizes = [1 << 20] if a.quick else SIZES
    threads = torch.get_num_threads()
    print(f"per step (forward + backward); bytes per element; kept = input-sized tensors saved for backward; "
          f"predicted on {a.soc}; CPU medians of {a.repeats} interleaved steps ({SMALL_REPEATS} under 1 Mi elements), "
          f"{threads} threads")  # fmt: skip
    head = ("| N x C | dtype | weights | reduction | grad_output | PyTorch ops | PyTorch 1+1 | torch_npu | before | "
            "fused | floor | fused / PyTorch 1+1 | kept PyTorch / before / fused | predicted before / fused us | "
            "fused / before | CPU PyTorch / fused ms | CPU fused / PyTorch |")  # fmt: skip
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    cases = [Case(n, "float32", "w[C] pw[C]", "mean", False) for n in sizes]
    mid = 1 << 20
    first = ("float32", "w[C] pw[C]", "mean", False)  # the size sweep's row at 1 Mi
    cases += [Case(mid, d, f, r, s) for d in DTYPES for f in FORMS for r in ("none", "sum", "mean")
              for s in (False, True) if (d, f, r, s) != first]  # fmt: skip
    if a.quick:
        cases = cases[:1] + [c for c in cases[1:] if c.dtype == "float32" and c.form == "none"]
    rows = []
    for case in cases:
        r = measure(case, a.soc, a.cpu_max, a.repeats)
        rows.append({**asdict(case), "bytes": r.bytes, "kept": r.kept, "predicted_us": r.us, "cpu_ms": r.cpu})
        b = r.bytes
        cpu = f"{r.cpu[0]:.3f} / {r.cpu[1]:.3f} | {r.cpu[1] / r.cpu[0]:.2f}x" if r.cpu else "- | -"
        print(f"| {case.shape[0]} x {C} | {case.dtype} | {case.form} | {case.reduction} | "
              f"{'scaled' if case.scaled else '1'} | {b['pytorch ops']:.1f} | {b['pytorch 1+1']:.1f} | "
              f"{b['torch_npu']:.1f} | {b['before']:.1f} | {b['fused']:.1f} | {b['floor']:.1f} | "
              f"{b['fused'] / b['pytorch 1+1']:.2f}x | {r.kept['pytorch']:.2f} / {r.kept['before']:.2f} / "
              f"{r.kept['fused']:.2f} | {r.us['before']:.1f} / {r.us['fused']:.1f} | "
              f"{r.us['fused'] / r.us['before']:.2f}x | {cpu} |", flush=True)  # fmt: skip
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
