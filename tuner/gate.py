"""The correctness gate: before a table entry is written, its tiling runs in the CPU twin (the real
kernel source) and the output is checked against the float64 reference.

Sizes up to ``FULL_RUN_LIMIT`` elements run whole. Larger ones run the cores whose arithmetic
differs (the first core, the first small core, the last core, which is cut to end at n-1) over
inputs that are random in a window at each end of those cores (first tiles, tail tile, core
boundaries) and zero elsewhere, where z must then be exactly zero: ``np.zeros`` pages that are
never touched cost no memory, so a 1Gi-element tiling is checked in about a second.
"""

from __future__ import annotations

from dataclasses import astuple, dataclass
from typing import Any

import numpy as np

from kernel import cpu
from kernel.reference import wrong_elements
from tiling_model import KernelFault, TilingParams, Variant, compute_tiling, core_plan

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
    dtype, reduction, weight, pos_weight, wrt = astuple(variant)
    classes = GATE_CLASSES if pos_weight == "last_dim" else 1
    shape = [n // classes, classes] if pos_weight == "last_dim" else [n]
    t = compute_tiling(shape, variant, params, soc)
    n = t.n
    ranges = [(c.index, c.start, c.count) for c in core_plan(t)]
    if n > FULL_RUN_LIMIT:
        picks = {0, t.fields.tailBlockNum, t.block_dim - 1}
        ranges = [r for r in ranges if r[0] in picks]
    d = cpu.DTYPES[dtype]
    is_int = np.issubdtype(d, np.integer)
    rng = np.random.default_rng(seed)
    flat = {k: np.zeros(n, dtype=d) for k in ("logits", "labels")}
    if reduction == "none":
        flat["grad"] = np.zeros(n, dtype=d)
    if weight:
        flat["weight"] = np.zeros(n, dtype=d)
    if pos_weight == "full":
        flat["pos_weight"] = np.zeros(n, dtype=d)
    windows = []
    for _, lo, count in ranges:
        if n > FULL_RUN_LIMIT and count > 2 * WINDOW:
            windows += [(lo, WINDOW), (lo + count - WINDOW, WINDOW)]
        else:
            windows.append((lo, count))
    for lo, count in windows:
        for k, a in flat.items():
            _fill(rng, a, lo, lo + count, {"logits": "p", "labels": "y"}.get(k, "w"), is_int)
    arrays: dict[str, np.ndarray | None] = {k: a.reshape(shape) for k, a in flat.items()}
    if reduction != "none":
        arrays["grad"] = rng.uniform(0.5, 2.0, 1).astype(d)
    if pos_weight == "last_dim":
        arrays["pos_weight"] = (rng.integers(-3, 4, classes) if is_int else rng.uniform(0.5, 3.0, classes)).astype(d)
    out = np.zeros(shape, dtype=d)
    try:
        cpu.run_tiling(t, arrays, out, cores=[r[0] for r in ranges])
    except cpu.KernelFault as e:
        raise GateFailure(f"{dtype}/{reduction}/n={n} {params}: twin fault: {e}") from None
    z = out.reshape(-1)
    pw = arrays.get("pos_weight")
    checked = 0
    bits = z.view(np.uint16 if z.itemsize == 2 else np.uint32)
    in_windows = sum(np.count_nonzero(bits[lo : lo + c]) for lo, c in windows)
    if sum(np.count_nonzero(bits[lo : lo + c]) for _, lo, c in ranges) != in_windows:
        raise GateFailure(f"{dtype}/{reduction}/n={n} {params}: non-zero output where every input was zero")
    for lo, count in windows:
        sl = slice(lo, lo + count)

        def part(k: str, sl: slice = sl) -> Any:
            a = arrays.get(k)
            if a is None:
                return None
            return a.reshape(-1)[sl] if a.size == n else a

        g = part("grad")
        pwp = None
        if pw is not None:
            pwp = pw.reshape(-1)[sl] if pos_weight == "full" else pw[np.arange(sl.start, sl.stop) % classes]
        args = (g, part("logits"), part("labels"), part("weight"), pwp)
        bad = wrong_elements(z[sl], *args, reduction, wrt, n)
        if bad.size:
            i = lo + int(bad[0])
            raise GateFailure(f"{dtype}/{reduction}/n={n} {params}: {bad.size} wrong elements, first at {i}")
        checked += count
    return GateResult(len(ranges), checked)
