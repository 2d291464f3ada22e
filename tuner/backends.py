"""Measurement backends: one interface, so the search does not care what times a tiling.

A backend takes single samples (one timed launch each) and can flush L2 between them; the
measurement protocol (``tuner.protocol``) decides how many samples make a measurement. The
cost model is deterministic unless it is given synthetic noise (to exercise the protocol and the
search as a real, noisy device would). ``cpu`` times the real kernel source in the CPU twin (a
real, noisy clock that exercises the protocol; its times say nothing about the NPU) and checks
each tiling's output once; ``npu`` times the compiled kernel with torch.npu.Event (not run here).
"""

from __future__ import annotations

import time
from typing import Any, Protocol

import numpy as np

from tiling_model import MeasurementError, TilingData, predict
from tiling_model.variant import operand_shape


class Backend(Protocol):
    name: str
    deterministic: bool  # one sample is the whole truth (no protocol needed)
    runs_kernel: bool  # times bcetune's compiled kernel (so only tilings that kernel can run)

    def sample(self, tiling: TilingData) -> float:
        """One timed launch of ``tiling``, in microseconds."""
        ...

    def flush_l2(self) -> None:
        """Evict L2 between samples so each one starts cold (a no-op where there is no cache)."""
        ...


class ModelBackend:
    """Times a tiling with ``tiling_model.predict``; ``noise`` adds lognormal relative noise and
    ``outlier_rate`` occasional 3x slow samples, both seeded for repeatable runs."""

    name = "model"
    runs_kernel = False

    def __init__(self, noise: float = 0.0, outlier_rate: float = 0.0, seed: int = 0) -> None:
        if noise < 0 or not 0 <= outlier_rate < 1:
            raise ValueError("noise must be >= 0 and outlier_rate in [0, 1)")
        self.noise = noise
        self.outlier_rate = outlier_rate
        self.deterministic = noise == 0 and outlier_rate == 0
        self._rng = np.random.default_rng(seed)

    def sample(self, tiling: TilingData) -> float:
        us = predict(tiling)
        if self.noise:
            us *= float(np.exp(self._rng.normal(0.0, self.noise)))
        if self.outlier_rate and self._rng.random() < self.outlier_rate:
            us *= 3.0
        return us

    def flush_l2(self) -> None:
        return None


class CpuTwinBackend:
    """Wall time of one run of the kernel source in the CPU twin (all cores, one thread).

    Inputs are made once per (shape, variant); the first run of each tiling is checked against the
    float64 reference, so a tiling that faults or computes wrongly fails its trial.
    """

    name = "cpu"
    deterministic = False
    runs_kernel = True
    MAX_ELEMENTS = 1 << 24

    def __init__(self, seed: int = 0) -> None:
        from kernel import cpu  # the twin needs g++ on first use: imported only when asked for

        self._cpu = cpu
        self._seed = seed
        self._inputs: dict[tuple, dict[str, Any]] = {}
        self._checked: set[tuple] = set()

    def _arrays(self, t: TilingData) -> dict[str, Any]:
        key = (t.shape, t.variant)
        if key not in self._inputs:
            rng = np.random.default_rng(self._seed)
            v = t.variant
            d = self._cpu.DTYPES[v.dtype]
            shape = t.shape
            is_int = np.issubdtype(d, np.integer)

            def mk(s: tuple[int, ...], lo: float, hi: float) -> np.ndarray:
                return np.asarray(rng.integers(-6, 7, s) if is_int else rng.uniform(lo, hi, s)).astype(d)

            w_shape = operand_shape(v.weight, shape, t.fields.weightPeriod)
            self._inputs[key] = {
                "grad": mk(shape if v.reduction == "none" else (1,), 0.5, 2.0),
                "logits": mk(shape, 0.02, 0.98),
                "labels": mk(shape, 0.0, 1.0),
                "weight": None if w_shape is None else mk(w_shape, 0.25, 4.0),
                "pos_weight": None
                if v.pos_weight == "none"
                else mk(shape if v.pos_weight == "full" else shape[-1:], 0.1, 5.0),
            }
        return self._inputs[key]

    def sample(self, tiling: TilingData) -> float:
        if tiling.n > self.MAX_ELEMENTS:
            raise MeasurementError(f"the cpu backend runs up to {self.MAX_ELEMENTS} elements, not {tiling.n}")
        a = self._arrays(tiling)
        out = np.zeros(tiling.shape, dtype=self._cpu.DTYPES[tiling.variant.dtype])
        start = time.perf_counter()
        try:
            self._cpu.run_tiling(tiling, a, out, threads=1)
        except self._cpu.KernelFault as e:
            raise MeasurementError(f"kernel fault in the CPU twin: {e}") from None
        us = (time.perf_counter() - start) * 1e6
        key = (tiling.shape, tiling.variant, tiling.params)
        if key not in self._checked:
            _check_output(tiling, a, out)
            self._checked.add(key)
        return us

    def flush_l2(self) -> None:
        return None


def _check_output(t: TilingData, a: dict[str, Any], out: np.ndarray) -> None:
    from kernel.reference import wrong_elements

    v = t.variant
    bad = wrong_elements(out, a["grad"], a["logits"], a["labels"], a["weight"], a["pos_weight"], v.reduction, v.wrt)
    if bad.size:
        raise MeasurementError(f"wrong output in the CPU twin: {bad.size} of {out.size} elements off the reference")


class NpuBackend:
    """One timed launch of the compiled kernel (torch.npu.Event); L2 flushed by a 256 MiB write.

    NOT RUN on bcetune's CI (no NPU): constructing it without torch_npu, a device or the built
    extension raises NpuUnavailable, which the CLI reports as one line.
    """

    name = "npu"
    deterministic = False
    runs_kernel = True

    def __init__(self, seed: int = 0, device: int | None = None) -> None:
        from kernel import npu

        self._npu = npu
        self._rt = npu.runtime(device)
        self._seed = seed
        self._inputs: dict[tuple, dict[str, Any]] = {}
        torch = self._rt.torch
        self._flush = torch.empty(npu.L2_FLUSH_BYTES, dtype=torch.uint8).npu()

    def sample(self, tiling: TilingData) -> float:
        torch = self._rt.torch
        key = (tiling.shape, tiling.variant)
        if key not in self._inputs:
            g = torch.Generator().manual_seed(self._seed)
            v = tiling.variant
            dt = getattr(torch, v.dtype)
            shape = tiling.shape
            mk = lambda s: torch.rand(s, generator=g).to(dt).npu()  # noqa: E731
            self._inputs[key] = {
                "grad": mk(shape if v.reduction == "none" else (1,)),
                "logits": mk(shape),
                "labels": mk(shape),
                "weight": mk(operand_shape(v.weight, shape, tiling.fields.weightPeriod)) if v.has_weight else None,
                "pos_weight": None if v.pos_weight == "none" else mk(shape if v.pos_weight == "full" else shape[-1:]),
            }
        try:
            return self._npu.time_launches(self._rt, tiling, self._inputs[key], warmup=0, repeats=1, flush_l2=False)[0]
        except RuntimeError as e:  # an ACL error or a timeout fails this trial only
            raise MeasurementError(f"NPU launch failed: {e}") from None

    def flush_l2(self) -> None:
        self._flush.zero_()


BACKENDS = ("model", "cpu", "npu", "synthetic")


def make_backend(
    name: str,
    noise: float = 0.0,
    outlier_rate: float = 0.0,
    seed: int = 0,
    soc: str = "Ascend910B2",
    device: int | None = None,
    device_shape: str = "knob",
) -> Backend:
    """The backend called ``name``: ``model`` (the cost model, optionally noisy), ``cpu`` (the CPU twin's
    clock), ``npu`` (the device ``device``) or ``synthetic`` (a stand-in device of ``soc``, number ``seed``,
    its shared effects of ``device_shape``: tuner.synthetic, to try the device loop without one). Only the
    model and the stand-in take noise."""
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; known: {', '.join(BACKENDS)}")
    if device is not None and name != "npu":
        raise ValueError(f"--device selects an NPU; the {name!r} backend has none")
    if device_shape != "knob" and name != "synthetic":
        raise ValueError(f"--device-shape shapes the synthetic backend's stand-in device, not the {name!r} backend")
    if name == "model":
        return ModelBackend(noise, outlier_rate, seed)
    if name == "synthetic":
        from tuner.synthetic import synthetic_backend

        return synthetic_backend(soc, max(seed, 1), noise or 0.02, outlier_rate or 0.03, device_shape)
    if noise or outlier_rate:
        raise ValueError(f"--noise and --outlier-rate apply to the model and synthetic backends, not {name!r}")
    if name == "cpu":
        return CpuTwinBackend(seed)
    return NpuBackend(seed, device)
