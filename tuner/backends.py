"""Measurement backends: one interface, so the search does not care what it times.

Only the cost-model backend exists so far; the CPU twin and the NPU join it with the kernel
and tuner issues.
"""

from __future__ import annotations

from typing import Protocol

from tiling_model import TilingData, predict


class Backend(Protocol):
    name: str

    def measure(self, tiling: TilingData) -> float:
        """Kernel time of ``tiling`` in microseconds."""
        ...


class ModelBackend:
    """Times a tiling with ``tiling_model.predict`` (no hardware needed)."""

    name = "model"

    def measure(self, tiling: TilingData) -> float:
        return predict(tiling)


BACKENDS: dict[str, type] = {"model": ModelBackend}


def make_backend(name: str) -> Backend:
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; available here: {', '.join(BACKENDS)}")
    return BACKENDS[name]()
