"""The one error tree of bcetune: every error raised on purpose is a BcetuneError of one kind, so
callers (the CLIs, the service, the tuner) map errors by kind, never by class name or message text.

    BcetuneError
    ├── BadRequest        input no tiling can express: shape, knob domain, variant, SoC, data file
    ├── InvalidTiling     a tiling that can be expressed but breaks a hardware rule (has violations)
    ├── TableError        a tuning table that cannot be used
    ├── MeasurementError  a timing that failed (kernel fault, timeout): that trial fails, the sweep goes on
    ├── KernelFault       the kernel did what the NPU would get wrong or hang on, or computed wrongly
    └── BuildError        the kernel or the NPU path cannot be built or loaded here

The kinds that describe bad input also subclass ValueError, the others RuntimeError, so code that
predates the tree keeps working. Each package adds its subclasses (e.g. kernel.cpu.KernelBuildError).
"""

from __future__ import annotations

from typing import Any


class BcetuneError(Exception):
    """Root of every error bcetune raises on purpose; ``kind`` names the branch."""

    kind = "bcetune_error"


class BadRequest(BcetuneError, ValueError):
    """Input no tiling can express: a bad shape or knob, an unsupported variant, an unknown SoC."""

    kind = "bad_request"

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field  # the input it concerns (a knob, "shape", "dtype"...), where one does


class InvalidTiling(BcetuneError, ValueError):
    """A tiling that breaks a hardware rule; ``violations`` lists them (kind, message, count)."""

    kind = "invalid_tiling"

    def __init__(self, message: str, violations: list[dict[str, Any]] | None = None, field: str | None = None) -> None:
        super().__init__(message)
        self.violations = violations or []
        self.field = field  # the knob it concerns, where one does


class TableError(BcetuneError, ValueError):
    """A tuning table that cannot be used; the message names the file and the problem."""

    kind = "table"


class MeasurementError(BcetuneError, RuntimeError):
    """A launch failed or timed out: the trial fails with this reason and the sweep continues."""

    kind = "measurement"


class KernelFault(BcetuneError, RuntimeError):
    """The kernel faulted (in the CPU twin: what the NPU would get wrong or hang on) or computed wrongly."""

    kind = "kernel_fault"


class BuildError(BcetuneError, RuntimeError):
    """The kernel, or the NPU path around it, cannot be built or loaded on this machine."""

    kind = "build"


__all__ = [
    "BadRequest",
    "BcetuneError",
    "BuildError",
    "InvalidTiling",
    "KernelFault",
    "MeasurementError",
    "TableError",
]
