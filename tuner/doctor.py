"""``python -m tuner doctor``: what a user with an Ascend host runs first, before tuning on the NPU.

In order, stopping at the first piece that is missing (one line saying which, exit 1):
CANN (``ASCEND_HOME_PATH``, its version), torch and torch_npu, the NPU device and its SoC profile,
the kernel-launch library (``kernel/build.sh --launch-lib``), then the golden cases on the device
against the float64 reference (every variant at edge sizes), the PyTorch operator as the losses'
backward on the device against PyTorch's (and its timing against ``torch.ops.aten``), and the seed
default against the tuned tiling on a few sizes; last, what a device sweep will do and cost
(``--plan SOC`` says only that, anywhere). Prints one report; exit 0 only if every check passed.

The golden cases and their check take any launcher, and the operator's checks any device, so the same
code runs here on the CPU twin (tests/tuner/test_doctor.py); on this project's machines the NPU steps
are not reached (no CANN).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from kernel import npu
from kernel.reference import wrong_elements
from tiling_model import (
    TableError,
    TilingData,
    TilingParams,
    Variant,
    compute_tiling,
    every_variant,
    known_socs,
    load_soc,
)
from tiling_model.dtypes import DTYPE_BYTES, FLOAT_DTYPES
from tiling_model.pick import refit
from tiling_model.tables import load_table
from tiling_model.variant import operand_shape
from tuner.sweep import TABLES_DIR

BUILD_SCRIPT = Path(__file__).resolve().parent.parent / "kernel" / "build.sh"
#: Files a CANN toolkit keeps its version in (the first that exists is reported).
CANN_VERSION_FILES = ("version.cfg", "compiler/version.info", "ascend_toolkit_install.info", "runtime/version.info")
LAST_DIM_CLASSES = 7
TIMED_SIZES = (1 << 16, 1 << 20, 1 << 24)
NUMPY_DTYPES = {
    "float32": np.dtype(np.float32),
    "float16": np.dtype(np.float16),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "int32": np.dtype(np.int32),
    "int16": np.dtype(np.int16),
}

#: Runs one tiling over numpy inputs and returns z as numpy (the NPU, or the CPU twin in tests).
Launcher = Callable[[TilingData, dict[str, np.ndarray | None]], np.ndarray]


class DoctorStop(RuntimeError):
    """A piece of the NPU path is missing: the doctor says which in one line and stops."""


@dataclass(frozen=True)
class GoldenCase:
    variant: Variant
    shape: tuple[int, ...]

    def label(self) -> str:
        return f"{self.variant.label()} shape={list(self.shape)}"


def golden_cases() -> list[GoldenCase]:
    """Every variant the kernel supports, at sizes that exercise one element, a partial block, the
    48-core split and a multi-tile run with a tail."""
    out = []
    for v in every_variant():
        per_block = 512 // DTYPE_BYTES[v.dtype]
        for n in (1, 129, 48 * per_block + 1, 100_003):
            c = LAST_DIM_CLASSES
            out.append(GoldenCase(v, (max(1, n // c), c) if v.pos_weight == "last_dim" else (n,)))
    return out


def case_inputs(case: GoldenCase, seed: int) -> dict[str, Any]:
    """Inputs in the operator's domain (p in (0, 1), hard and soft labels; small ints)."""
    rng = np.random.default_rng(seed)
    v = case.variant
    d = NUMPY_DTYPES[v.dtype]
    shape = case.shape
    if v.dtype not in FLOAT_DTYPES:
        small = lambda s: rng.integers(-6, 7, s).astype(d)  # noqa: E731  (no int16 overflow)
        return {
            "grad": small(shape),
            "logits": small(shape),
            "labels": small(shape),
            "weight": small(operand_shape(v.weight, shape)) if v.has_weight else None,
            "pos_weight": None if v.pos_weight == "none" else small(shape if v.pos_weight == "full" else shape[-1:]),
        }
    n = int(np.prod(shape))
    y = np.where(rng.random(n) < 0.5, rng.integers(0, 2, n), rng.random(n)).reshape(shape)
    pw_shape = shape if v.pos_weight == "full" else shape[-1:]
    return {
        "grad": (rng.normal(size=shape if v.reduction == "none" else (1,)) * 2).astype(d),
        "logits": rng.uniform(0.02, 0.98, shape).astype(d),
        "labels": y.astype(d),
        "weight": rng.uniform(0.25, 4.0, operand_shape(v.weight, shape)).astype(d) if v.has_weight else None,
        "pos_weight": None if v.pos_weight == "none" else rng.uniform(0.1, 5.0, pw_shape).astype(d),
    }


def run_golden(launch: Launcher, soc: str, cases: list[GoldenCase]) -> list[str]:
    """Run every case with its default tiling on ``soc``; the failures, one line each."""
    failures = []
    for i, case in enumerate(cases):
        a = case_inputs(case, i)
        t = compute_tiling(list(case.shape), case.variant, None, soc)
        try:
            z = launch(t, a)
        except Exception as e:  # noqa: BLE001 - a launch error is this case's failure, the rest still run
            failures.append(f"{case.label()}: launch failed: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
            continue
        v = case.variant
        bad = wrong_elements(z, a["grad"], a["logits"], a["labels"], a["weight"], a["pos_weight"], v.reduction, v.wrt)
        if bad.size:
            failures.append(f"{case.label()}: {bad.size} of {z.size} elements off the reference, first at {bad[0]}")
    return failures


# ------------------------------------------------------------------ the steps


def check_cann(env: dict[str, str]) -> str:
    home = env.get("ASCEND_HOME_PATH")
    if not home:
        raise DoctorStop("CANN: ASCEND_HOME_PATH is not set (install the CANN toolkit and source its set_env.sh)")
    root = Path(home)
    if not root.is_dir():
        raise DoctorStop(f"CANN: ASCEND_HOME_PATH={home} is not a directory")
    for name in CANN_VERSION_FILES:
        f = root / name
        if f.is_file():
            for line in f.read_text(errors="replace").splitlines():
                key, _, value = line.partition("=")
                if key.strip().lower() in ("version", "toolkit_version", "runtime_version") and value.strip():
                    return f"{home} (version {value.strip()}, from {name})"
    return f"{home} (version file not found: the compile tests checked the headers of CANN 8.5.0)"


def check_torch() -> tuple[Any, str]:
    try:
        torch = npu.load_torch_npu()
    except npu.NpuUnavailable as e:
        raise DoctorStop(f"torch_npu: {e}") from None
    import torch_npu

    return torch, f"torch {torch.__version__}, torch_npu {getattr(torch_npu, '__version__', 'unknown')}"


def check_device(torch: Any) -> str:
    if not torch.npu.is_available():
        raise DoctorStop("device: torch_npu found no NPU (check npu-smi info and the driver)")
    soc = str(torch.npu.get_device_name())
    if soc not in known_socs():
        raise DoctorStop(f"device: SoC {soc!r} has no profile in tiling_model (known: {', '.join(known_socs())})")
    return soc


def build_launch_library(soc: str, log: Path) -> Path:
    with log.open("w") as f:
        env = dict(os.environ, PYTHON=sys.executable)  # build the extension for this Python's torch
        proc = subprocess.run(
            ["bash", str(BUILD_SCRIPT), "--launch-lib", "--soc", soc], stdout=f, stderr=f, env=env, check=False
        )
    ext = npu.extension_path()
    if proc.returncode != 0 or not ext.exists():
        raise DoctorStop(f"build: kernel/build.sh --launch-lib --soc {soc} failed (exit {proc.returncode}); see {log}")
    return ext


def npu_launcher(rt: npu.NpuRuntime) -> Launcher:
    torch = rt.torch

    def to_device(a: np.ndarray | None) -> Any:
        if a is None:
            return None
        if a.dtype == NUMPY_DTYPES["bfloat16"]:  # torch.from_numpy knows no ml_dtypes bfloat16: exact via float32
            return torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16).npu()
        return torch.from_numpy(np.ascontiguousarray(a)).npu()

    def launch(t: TilingData, a: dict[str, np.ndarray | None]) -> np.ndarray:
        tensors = {k: to_device(v) for k, v in a.items()}
        z = torch.empty_like(tensors["logits"])
        npu.launch(rt, t, npu.device_tiling(rt, t), tensors, z)
        torch.npu.synchronize()
        if z.dtype == torch.bfloat16:
            return z.float().cpu().numpy().astype(NUMPY_DTYPES["bfloat16"])
        return z.cpu().numpy()

    return launch


def tuned_params(table_path: Path, soc: str, variant: Variant, n: int) -> tuple[TilingParams, str]:
    """What the service would answer for this size (table entry, re-fit to the size), else the default."""
    try:
        table = load_table(table_path)
    except TableError:
        return TilingParams(), "default (no table)"
    entry = table.lookup(variant, n)
    if entry is None:
        return TilingParams(), "default (no entry)"
    if entry.size == n:
        return entry.tiling_params(), "table"
    return refit(n, variant, load_soc(soc), entry.tiling_params()), "table, re-fit"


def time_seed_vs_tuned(rt: npu.NpuRuntime, soc: str, table_path: Path) -> Iterator[str]:
    torch = rt.torch
    for variant in (Variant("float32", "none"), Variant("float16", "mean")):
        for n in TIMED_SIZES:
            tuned, source = tuned_params(table_path, soc, variant, n)
            a = case_inputs(GoldenCase(variant, (n,)), 0)
            tensors = {k: (None if x is None else torch.from_numpy(x).npu()) for k, x in a.items()}
            times = []
            for params in (TilingParams(), tuned):
                t = compute_tiling([n], variant, params, soc)
                samples = npu.time_launches(rt, t, tensors, warmup=3, repeats=20, flush_l2=True)
                times.append(float(np.median(samples)))
            yield (
                f"  {variant.dtype:<8} {variant.reduction:<5} n={n:>9}: seed default {times[0]:9.2f} us, "
                f"tuned ({source}) {times[1]:9.2f} us, {times[0] / times[1]:.3f}x"
            )


#: The losses' checks: (kind, dtype, reduction, weight shape, pos_weight shape) on an input of TORCH_OP_SHAPE.
TORCH_OP_SHAPE = (33, 257)
TORCH_OP_CASES = [
    (kind, dtype, reduction, w, pw)
    for kind, w, pw in (
        ("logits", None, None),
        ("logits", (33, 1), (257,)),
        ("logits", (257,), None),
        ("probability", None, None),
        ("probability", (257,), None),
    )  # fmt: skip
    for dtype in FLOAT_DTYPES
    for reduction in ("none", "mean")
]


@dataclass(frozen=True)
class LossCase:
    """One loss call of the operator's check, in float64 (rounded to the dtype where it runs)."""

    kind: str  # "logits" (BCEWithLogits, wrt the logit) or "probability" (BCE)
    dtype: str
    reduction: str
    x: Any
    y: Any
    weight: Any
    pos_weight: Any
    upstream: Any  # the gradient flowing into the loss

    @property
    def wrt(self) -> str:
        return "logit" if self.kind == "logits" else "probability"

    def label(self) -> str:
        shape = lambda t: None if t is None else tuple(t.shape)  # noqa: E731
        return (
            f"{self.kind} {self.dtype} {self.reduction} weight={shape(self.weight)} pos_weight={shape(self.pos_weight)}"
        )

    def rounded(self, torch: Any, device: str) -> list[Any]:
        """x, y, weight, pos_weight, upstream in the case's dtype on ``device`` (fresh tensors)."""
        dt = getattr(torch, self.dtype)
        ts = (self.x, self.y, self.weight, self.pos_weight, self.upstream)
        return [None if t is None else t.to(dt).to(device, copy=True) for t in ts]

    def input_grad(self, torch: Any, device: str, bcetune: bool) -> Any:
        """The loss's input gradient on ``device``: the bcetune loss's (the operator) or PyTorch's."""
        import warnings

        import torch.nn.functional as F

        from kernel import torch_op
        from kernel.torch_op.losses import kernel_on_cpu

        x, y, w, pw, up = self.rounded(torch, device)
        x.requires_grad_()
        with warnings.catch_warnings(), kernel_on_cpu():  # the kernel's backward on the CPU too (the twin)
            warnings.simplefilter("ignore", torch_op.FallbackWarning)  # checked by the caller (why_not_kernel)
            if self.kind == "logits":
                logits = torch_op.binary_cross_entropy_with_logits if bcetune else F.binary_cross_entropy_with_logits
                loss = logits(x, y, w, reduction=self.reduction, pos_weight=pw)
            else:
                probability = torch_op.binary_cross_entropy if bcetune else F.binary_cross_entropy
                loss = probability(x, y, w, reduction=self.reduction)
        loss.backward(up)
        return x.grad


def torch_op_cases(torch: Any) -> list[LossCase]:
    gen = torch.Generator().manual_seed(0)
    out = []
    for kind, dtype, reduction, w_shape, pw_shape in TORCH_OP_CASES:
        x = torch.randn(TORCH_OP_SHAPE, generator=gen, dtype=torch.float64)
        x = torch.sigmoid(x) if kind == "probability" else x
        y = (torch.rand(TORCH_OP_SHAPE, generator=gen) < 0.5).double()
        w = None if w_shape is None else torch.rand(w_shape, generator=gen, dtype=torch.float64) + 0.5
        pw = None if pw_shape is None else torch.rand(pw_shape, generator=gen, dtype=torch.float64) * 3 + 0.25
        up = torch.randn(TORCH_OP_SHAPE if reduction == "none" else (), generator=gen, dtype=torch.float64)
        out.append(LossCase(kind, dtype, reduction, x, y, w, pw, up))
    return out


def torch_op_failures(torch: Any, device: str) -> tuple[int, list[str]]:
    """The bcetune losses' input gradients on ``device`` (BCEWithLogits: the kernel's fused mode in its
    forward; BCE: ``torch.ops.bcetune.bce_grad`` in its backward) against PyTorch's float64 backward on the
    CPU, within the kernel's tolerance (PyTorch's own backward on the device is reported beside a failure).
    A case the kernel would not run (the loss would fall back to PyTorch's backward) fails. Returns (cases,
    failures)."""
    import torch.nn.functional as F

    from kernel import torch_op
    from kernel.reference import mismatches, terms

    failures = []
    cases = torch_op_cases(torch)
    for case in cases:
        x, y, w, pw, _ = case.rounded(torch, device)
        why = torch_op.why_not_kernel(x.requires_grad_(), y, w, pw, case.wrt)
        if why is not None:
            failures.append(f"{case.label()}: the kernel does not run ({why})")
            continue
        ours = case.input_grad(torch, device, bcetune=True).cpu()
        doubled: list[Any] = [None if t is None else t.double() for t in case.rounded(torch, "cpu")]
        x64, y64, w64, pw64, up64 = doubled
        x64.requires_grad_()
        if case.kind == "logits":
            F.binary_cross_entropy_with_logits(x64, y64, w64, reduction=case.reduction, pos_weight=pw64).backward(up64)
            p = torch.sigmoid(x64.detach())
        else:
            F.binary_cross_entropy(x64, y64, w64, reduction=case.reduction).backward(up64)
            p = x64.detach()
        arrays: list[Any] = [None if t is None else t.numpy() for t in (up64, p, y64, w64, pw64)]
        size = terms(arrays[0], arrays[1], arrays[2], arrays[3], arrays[4], case.reduction, case.wrt)
        got = ours.float().numpy().astype(NUMPY_DTYPES[case.dtype]) if case.dtype == "bfloat16" else ours.numpy()
        eps = float(torch.finfo(getattr(torch, case.dtype)).eps) if case.kind == "logits" else 0.0
        bad = mismatches(got, x64.grad.numpy(), size, cancels=True, input_eps=eps)
        if bad.size:
            theirs = case.input_grad(torch, device, bcetune=False).cpu().double()
            err = float((theirs - x64.grad).abs().max())
            failures.append(
                f"{case.label()}: {bad.size} elements off the float64 backward "
                f"(PyTorch's own backward on {device}: max error {err:.3g})"
            )
    return len(cases), failures


def torch_op_timing(
    torch: Any, device: str, sync: Callable[[], None], sizes: Sequence[int] = TIMED_SIZES
) -> Iterator[str]:
    """Per call on ``device``, median of 5 batches of 20: the operator wrt the probability against
    ``torch.ops.aten.binary_cross_entropy_backward`` (the same gradient, one aten op), and a step (forward
    and backward) of the bcetune logits loss (the kernel's fused mode) against PyTorch's."""
    import statistics

    import torch.nn.functional as F

    from kernel import torch_op
    from kernel.torch_op.losses import kernel_on_cpu

    def per_call_us(fn: Callable[[], object]) -> float:
        fn()
        sync()
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(20):
                fn()
            sync()
            times.append((time.perf_counter() - t0) / 20)
        return statistics.median(times) * 1e6

    def one_size(n: int) -> str:
        p = torch.rand(n, device=device) * 0.96 + 0.02
        y = (torch.rand(n, device=device) < 0.5).float()
        g = torch.randn((), device=device)
        ours = per_call_us(lambda: torch.ops.bcetune.bce_grad(g, p, y, None, None, "mean", "probability"))
        aten = per_call_us(lambda: torch.ops.aten.binary_cross_entropy_backward(g, p, y, None, 1))
        x = torch.randn(n, device=device, requires_grad=True)

        def step(f: Callable[..., Any]) -> Callable[[], object]:
            return lambda: torch.autograd.grad(f(x, y), x)

        with kernel_on_cpu():  # the kernel on the CPU too (the twin)
            steps = [per_call_us(step(f)) for f in (torch_op.binary_cross_entropy_with_logits,
                                                    F.binary_cross_entropy_with_logits)]  # fmt: skip
        return (
            f"  float32 mean n={n:>9}: bce_grad(probability) {ours:9.2f} us vs aten.binary_cross_entropy_backward "
            f"{aten:9.2f} us ({aten / ours:.2f}x); logits loss step {steps[0]:9.2f} us vs PyTorch's "
            f"{steps[1]:9.2f} us ({steps[1] / steps[0]:.2f}x)"
        )

    for n in sizes:
        yield one_size(n)


SWEEP_TRIALS = 20


def plan_lines(soc: str, trials: int = SWEEP_TRIALS, devices: int = 1) -> list[str]:
    """What a sweep on this device will do, and what it will cost (the shipped table's keys)."""
    from tuner.device_time import REFIT_S, REFIT_S_PER_KEY, STORAGE_S_PER_TRIAL, estimate, refits_seconds
    from tuner.protocol import MeasurementProtocol
    from tuner.race import RacePlan
    from tuner.sweep import sweep_keys

    sizes = tuple(4**k for k in range(5, 16))
    keys = sweep_keys(soc, list(NUMPY_DTYPES), ("none", "sum", "mean"), ("full", "none"), sizes,
                      ("none", "full", "last_dim"), ("logit", "probability"))  # fmt: skip
    plan, protocol = RacePlan(), MeasurementProtocol()
    cost = estimate(keys, trials, protocol, plan)
    per_device = cost.seconds / max(devices, 1)
    return [
        f"plan: python -m tuner sweep --soc {soc} --backend npu --trials {trials} --records runs.jsonl "
        "--storage postgresql://... (one worker per NPU: --device N; every worker learns from all)",
        f"  {len(keys)} keys; per key the device model's candidates first ({plan.first_samples} samples each, "
        f"warm-up {protocol.warmup}, L2 flushed before each where the launch's footprint is under 4x L2), "
        f"learning within the key, then a race of the {plan.contenders} fastest to {plan.max_samples} samples",
        "  after every key the SoC profile and the learned residual over the realised tiling (or, where held-out keys "
        "rank better with it, the knob correction) are refitted on every measurement in the storage; the table "
        "carries the profile fitted on the whole sweep",
        f"  device time: {cost.text()}, about {per_device / 3600:.1f} h per device with {devices} device(s)",
        f"  host time in the refits: about {refits_seconds(len(keys)) / 60:.0f} min in all, shared by the workers "
        f"(each about {REFIT_S + REFIT_S_PER_KEY * len(keys):.1f} s by the last key on a 2-core host: "
        "benchmarks/learner_cost.py); in the storage about "
        f"{len(keys) * trials * STORAGE_S_PER_TRIAL / 60:.0f} min ({len(keys) * trials} trials, "
        f"~{1000 * STORAGE_S_PER_TRIAL:.0f} ms each on PostgreSQL: benchmarks/trial_writes.py); then the gate",
    ]


def main(argv: Sequence[str] | None = None, env: dict[str, str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tuner doctor", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--plan", metavar="SOC", help="only say what a device sweep of SOC would do and cost (no device needed)"
    )
    parser.add_argument("--no-build", action="store_true", help="use the launch library already built")
    parser.add_argument("--table", type=Path, help="tuned table to time against (default: the shipped one)")
    parser.add_argument("--log", type=Path, default=Path("doctor-build.log"), help="where the build's output goes")
    args = parser.parse_args(argv)
    if args.plan:
        if args.plan not in known_socs():
            parser.error(f"unknown SoC {args.plan!r}; known: {', '.join(known_socs())}")
        print(f"planning a device sweep of {args.plan}: its keys and what each costs (about 10 s)...", file=sys.stderr,
              flush=True)  # fmt: skip
        print("\n".join(plan_lines(args.plan)))
        return 0
    env = dict(os.environ) if env is None else env
    report: list[str] = []

    def ok(step: str, detail: str) -> None:
        report.append(f"ok    {step:<8} {detail}")
        print(report[-1], flush=True)

    try:
        ok("cann", check_cann(env))
        torch, versions = check_torch()
        ok("torch", versions)
        soc = check_device(torch)
        ok("device", soc)
        ext = npu.extension_path() if args.no_build else build_launch_library(soc, args.log)
        if not ext.exists():
            raise DoctorStop(f"build: {ext} does not exist (run without --no-build)")
        ok("build", str(ext))
        rt = npu.runtime()
    except DoctorStop as e:
        print(f"FAIL  {e}", file=sys.stderr)
        return 1
    start = time.perf_counter()
    cases = golden_cases()
    failures = run_golden(npu_launcher(rt), soc, cases)
    for f in failures[:20]:
        print(f"FAIL  golden   {f}", file=sys.stderr)
    if failures:
        print(f"FAIL  golden   {len(failures)} of {len(cases)} cases wrong", file=sys.stderr)
        return 1
    ok(
        "golden",
        f"{len(cases)} cases, every variant, match the float64 reference ({time.perf_counter() - start:.1f} s)",
    )
    start = time.perf_counter()
    cases_run, op_failures = torch_op_failures(rt.torch, "npu")
    for f in op_failures[:20]:
        print(f"FAIL  torch op {f}", file=sys.stderr)
    if op_failures:
        print(f"FAIL  torch op {len(op_failures)} of {cases_run} loss cases wrong", file=sys.stderr)
        return 1
    ok(
        "torch op",
        f"{cases_run} loss cases: torch.ops.bcetune.bce_grad on the NPU as the losses' backward matches "
        f"PyTorch's float64 backward ({time.perf_counter() - start:.1f} s)",
    )
    print("torch op timing (per call, median of 5 batches of 20):", flush=True)
    for line in torch_op_timing(rt.torch, "npu", rt.torch.npu.synchronize):
        print(line, flush=True)
    print("timing (median of 20 launches, L2 flushed before each):", flush=True)
    for line in time_seed_vs_tuned(rt, soc, args.table or TABLES_DIR / f"{soc}.json"):
        print(line, flush=True)
    count = int(rt.torch.npu.device_count())
    print("\n".join(plan_lines(soc, devices=count)))
    print("doctor: every check passed")
    return 0
