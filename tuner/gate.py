"""The correctness gate: before a table entry is written, its tiling runs in the CPU twin (the real
kernel source) and the output is checked against the float64 reference.

Sizes up to ``FULL_RUN_LIMIT`` elements run whole. Larger ones run the cores whose arithmetic
differs (the first core, the first small core, the last core, which is cut to end at n-1) over
inputs that are random in a window at each end of those cores (first tiles, tail tile, core
boundaries) and zero elsewhere, where z must then be exactly zero: ``np.zeros`` pages that are
never touched cost no memory, so a 1Gi-element tiling is checked in about a second.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from kernel import cpu
from kernel.reference import fused_reference, wrong_elements, wrong_fused_elements
from tiling_model import KernelFault, TilingData, TilingParams, Variant, compute_tiling, core_plan

FULL_RUN_LIMIT = 1 << 22
WINDOW = 1 << 16  # random elements at each end of a core in a partial run
#: C of a last-dim pos_weight in the gate (it divides every tuned size; C does not change the knobs)
GATE_CLASSES = 64


class GateFailure(KernelFault):
    """The tuned tiling faulted in the twin or gave a wrong answer: the entry must not ship."""


@dataclass(frozen=True)
class GateResult:
    cores_run: int
    elements_checked: int


def _fill(rng: np.random.Generator, a: np.ndarray, lo: int, hi: int, kind: str, is_int: bool) -> None:
    n = hi - lo
    if is_int:
        a[lo:hi] = rng.integers(-6, 7, n).astype(a.dtype)
    elif kind == "p":
        a[lo:hi] = rng.uniform(0.02, 0.98, n).astype(a.dtype)
    elif kind == "y":
        a[lo:hi] = rng.integers(0, 2, n).astype(a.dtype)
    else:
        a[lo:hi] = rng.uniform(0.25, 2.0, n).astype(a.dtype)


def check_tiling(soc: str, n: int, variant: Variant, params: TilingParams, seed: int = 0) -> GateResult:
    """Run ``params`` for ``n`` elements of this variant in the twin and check z; GateFailure if not right."""
    classes = GATE_CLASSES if variant.pos_weight == "last_dim" else 1
    shape = [n // classes, classes] if variant.pos_weight == "last_dim" else [n]
    t = compute_tiling(shape, variant, params, soc)
    what = f"{variant.dtype}/{variant.reduction}/n={t.n} {params}"
    if variant.mode == "fused":
        return _check_fused(t, what, classes, np.random.default_rng(seed))
    ranges, windows = _cores_and_windows(t)
    arrays = _inputs(t, windows, classes, np.random.default_rng(seed))
    out = np.zeros(shape, dtype=cpu.DTYPES[variant.dtype])
    try:
        cpu.run_tiling(t, arrays, out, cores=[i for i, _, _ in ranges])
    except cpu.KernelFault as e:
        raise GateFailure(f"{what}: twin fault: {e}") from None
    z = out.reshape(-1)
    bits = z.view(np.uint16 if z.itemsize == 2 else np.uint32)
    in_windows = sum(np.count_nonzero(bits[lo : lo + c]) for lo, c in windows)
    if sum(np.count_nonzero(bits[lo : lo + c]) for _, lo, c in ranges) != in_windows:
        raise GateFailure(f"{what}: non-zero output where every input was zero")
    for lo, count in windows:
        bad = wrong_elements(z[lo : lo + count], *_window_inputs(t, arrays, lo, count, classes), t.n)
        if bad.size:
            raise GateFailure(f"{what}: {bad.size} wrong elements, first at {lo + int(bad[0])}")
    return GateResult(len(ranges), sum(c for _, c in windows))


def _check_fused(t: TilingData, what: str, classes: int, rng: np.random.Generator) -> GateResult:
    """The fused mode's gate: dx (and the loss for none) in the windows within the dtype's rounding of the
    float64 closed form; for sum and mean, each run core's float sum of the loss over its whole range where
    the run is whole (up to FULL_RUN_LIMIT elements)."""
    v, n = t.variant, t.n
    ranges, windows = _cores_and_windows(t)
    d = cpu.DTYPES[v.dtype]
    x, y = np.zeros(n, dtype=d), np.zeros(n, dtype=d)
    w = np.zeros(n, dtype=d) if v.weight == "full" else None
    pw = np.zeros(n, dtype=d) if v.pos_weight == "full" else None
    for lo, count in windows:
        x[lo : lo + count] = rng.normal(0.0, 4.0, count).astype(d)
        y[lo : lo + count] = rng.integers(0, 2, count).astype(d)
        for a in (w, pw):
            if a is not None:
                a[lo : lo + count] = rng.uniform(0.25, 2.0, count).astype(d)
    if v.pos_weight == "last_dim":
        pw = rng.uniform(0.5, 3.0, classes).astype(d)
    arrays: dict[str, np.ndarray | None] = {
        "logits": x.reshape(t.shape), "labels": y.reshape(t.shape),
        "weight": None if w is None else w.reshape(t.shape),
        "pos_weight": None if pw is None else (pw.reshape(t.shape) if pw.size == n else pw),
    }  # fmt: skip
    none = v.reduction == "none"
    dx = np.zeros(n, dtype=d)
    loss = np.zeros(n, dtype=d) if none else np.zeros(max(t.block_dim, 1), dtype=np.float32)
    try:
        cpu.run_fused_tiling(t, arrays, dx.reshape(t.shape), loss.reshape(t.shape) if none else loss,
                             cores=[i for i, _, _ in ranges])  # fmt: skip
    except cpu.KernelFault as e:
        raise GateFailure(f"{what}: twin fault: {e}") from None
    scale = 1 / n if v.reduction == "mean" else 1.0

    def window(lo: int, count: int) -> tuple[np.ndarray, ...]:
        wpart = None if w is None else w[lo : lo + count]
        if pw is None:
            pwpart = None
        else:
            pwpart = pw[lo : lo + count] if pw.size == n else pw[np.arange(lo, lo + count) % classes]
        return fused_reference(x[lo : lo + count], y[lo : lo + count], wpart, pwpart, scale)

    for lo, count in windows:
        ref_loss, ref_dx, loss_size, dx_size = window(lo, count)
        bad = wrong_fused_elements(dx[lo : lo + count], ref_dx, dx_size)
        if none and not bad.size:
            bad = wrong_fused_elements(loss[lo : lo + count], ref_loss, loss_size)
        if bad.size:
            raise GateFailure(f"{what}: {bad.size} wrong elements, first at {lo + int(bad[0])}")
    if not none and n <= FULL_RUN_LIMIT:
        for index, lo, count in ranges:
            ref_loss, _, loss_size, _ = window(lo, count)
            got, want = float(loss[index]), float(ref_loss.sum())
            if not abs(got - want) <= 1e-5 * float(loss_size.sum()) + 1e-30:
                raise GateFailure(f"{what}: core {index}'s loss sum {got!r} is not {want!r}")
    return GateResult(len(ranges), sum(c for _, c in windows))


def _cores_and_windows(t: TilingData) -> tuple[list[tuple[int, int, int]], list[tuple[int, int]]]:
    """The cores to run (index, first element, count): all of them up to FULL_RUN_LIMIT elements, else
    the first core, the first small core and the last core; and the windows of random input in them."""
    ranges = [(c.index, c.start, c.count) for c in core_plan(t)]
    if t.n <= FULL_RUN_LIMIT:
        return ranges, [(lo, count) for _, lo, count in ranges]
    picks = {0, t.fields.tailBlockNum, t.block_dim - 1}
    ranges = [r for r in ranges if r[0] in picks]
    windows = []
    for _, lo, count in ranges:
        windows += [(lo, WINDOW), (lo + count - WINDOW, WINDOW)] if count > 2 * WINDOW else [(lo, count)]
    return ranges, windows


def _inputs(
    t: TilingData, windows: list[tuple[int, int]], classes: int, rng: np.random.Generator
) -> dict[str, np.ndarray | None]:
    """Inputs that are random in the windows and zero elsewhere (untouched zero pages cost no memory)."""
    v, n = t.variant, t.n
    d = cpu.DTYPES[v.dtype]
    is_int = bool(np.issubdtype(d, np.integer))
    names = ["logits", "labels"] + ["grad"] * (v.reduction == "none") + ["weight"] * (v.weight == "full")
    names += ["pos_weight"] * (v.pos_weight == "full")
    flat = {k: np.zeros(n, dtype=d) for k in names}
    for lo, count in windows:
        for k, a in flat.items():
            _fill(rng, a, lo, lo + count, {"logits": "p", "labels": "y"}.get(k, "w"), is_int)
    arrays: dict[str, np.ndarray | None] = {k: a.reshape(t.shape) for k, a in flat.items()}
    if v.reduction != "none":
        arrays["grad"] = rng.uniform(0.5, 2.0, 1).astype(d)
    if v.pos_weight == "last_dim":
        arrays["pos_weight"] = (rng.integers(-3, 4, classes) if is_int else rng.uniform(0.5, 3.0, classes)).astype(d)
    return arrays


WindowArgs = tuple[Any, Any, Any, np.ndarray | None, np.ndarray | None, str, str]


def _window_inputs(
    t: TilingData, arrays: dict[str, np.ndarray | None], lo: int, count: int, classes: int
) -> WindowArgs:
    """The reference's arguments for elements [lo, lo + count): each input's window (a scalar grad
    and a [C] pos_weight as the kernel sees them), then the reduction and wrt."""
    v = t.variant

    def part(k: str) -> np.ndarray | None:
        a = arrays.get(k)
        return None if a is None else (a.reshape(-1)[lo : lo + count] if a.size == t.n else a)

    pw = arrays.get("pos_weight")
    if pw is not None and v.pos_weight == "last_dim":
        pw = pw[np.arange(lo, lo + count) % classes]
    elif pw is not None:
        pw = part("pos_weight")
    return (part("grad"), part("logits"), part("labels"), part("weight"), pw, v.reduction, v.wrt)
