"""The C++ host tiling the CANN build ships (``op_host/bce_grad_tuned_tiling.h``), run from Python.

``host/tuned_knobs_main.cpp`` wraps ``bce_grad::TunedKnobs`` and ``TunedTiling`` in a line-oriented
program; it is built with g++ once per source hash into ``$BCETUNE_CACHE_DIR`` (as the CPU twin is),
with the flags the parity with the Python cost model needs (no FMA contraction). The parity test and
``make bench-regret`` ask it what the compiled operator would choose.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from kernel.cpu import build_once, cache_dir
from tiling_model import BuildError, TilingParams, Variant, load_soc
from tiling_model.dtypes import DTYPE_ID, REDUCTION_ID
from tiling_model.engine import INCLUDE_DIR as ENGINE_INCLUDE
from tiling_model.variant import BROADCAST_FORMS, MODES, PERIODIC_FORMS, WRT_FORMS

CXXFLAGS = ("-std=c++17", "-O2", "-ffp-contract=off", "-Wall", "-Wextra", "-Werror")


@dataclass(frozen=True)
class HostKnobs:
    """What the build does for one call: the table entry it looked up (None: no entry), the knobs it
    used, whether the cost model re-fit them, and the tiling struct's fields and block dim (None if
    the tiling was refused)."""

    entry_size: int | None
    params: TilingParams
    refitted: bool
    fields: tuple[int, ...] | None
    block_dim: int | None


def _root() -> Path:
    return Path(str(resources.files("kernel")))


def _sources() -> list[Path]:
    root = _root()
    return (
        sorted((root / "op_host").glob("*.h"))
        + sorted(ENGINE_INCLUDE.glob("*.h"))
        + sorted((root / "op_kernel").glob("*.h"))
        + [root / "host" / "tuned_knobs_main.cpp"]
    )


def build_host_tiling(table_header: Path | None = None) -> Path:
    """The query program, built once per source and compiler; BuildError without g++ or on errors.
    ``table_header``: a generated ``bce_grad_tuned_table.h`` in place of the committed one (say, of a
    device-tuned table: ``python -m tuner export-header``), to ask what a build of it would do."""
    cxx = shutil.which(os.environ.get("CXX", "g++"))
    if cxx is None:
        raise BuildError("no C++ compiler: install g++ (or set CXX) to build the C++ host tiling")
    h = hashlib.sha256(subprocess.run([cxx, "--version"], capture_output=True, text=True, check=False).stdout.encode())
    h.update(" ".join(CXXFLAGS).encode())
    for f in _sources():
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    if table_header is not None:
        h.update(b"table\0" + table_header.read_bytes())

    def build(out: Path) -> None:
        main = _root() / "host" / "tuned_knobs_main.cpp"
        op_host = _root() / "op_host"
        if table_header is not None:  # op_host's headers beside the given table: theirs is what they include
            op_host = out.parent / "op_host"
            shutil.copytree(_root() / "op_host", op_host)
            shutil.copyfile(table_header, op_host / "bce_grad_tuned_table.h")
        cmd = [cxx, *CXXFLAGS, "-I", str(op_host), "-I", str(ENGINE_INCLUDE), str(main), "-o", str(out)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise BuildError(f"the C++ host tiling did not compile:\n{proc.stderr[-4000:]}")

    return build_once(cache_dir() / f"tuned_knobs-{h.hexdigest()[:16]}", build)


def query_host_tiling(
    calls: Sequence[tuple[str, Variant, int] | tuple[str, Variant, int, int]], exe: Path | None = None
) -> list[HostKnobs]:
    """What the build does for each (SoC, variant, element count[, weight period]) call, on the SoC's
    own platform numbers (UB size, reserve, vector cores); a last-dim pos_weight's C is the element
    count (shape [n]); a last-dim or rows weight's period defaults to n as well."""
    exe = exe or build_host_tiling()
    lines = []
    for call in calls:
        soc_name, v, n = call[:3]
        period = call[3] if len(call) > 3 else (n if v.weight in PERIODIC_FORMS else 0)
        soc = load_soc(soc_name)
        lines.append(
            f"{soc_name} {DTYPE_ID[v.dtype]} {REDUCTION_ID[v.reduction]} {BROADCAST_FORMS.index(v.weight)} "
            f"{BROADCAST_FORMS.index(v.pos_weight)} {WRT_FORMS.index(v.wrt)} {MODES.index(v.mode)} {n} {period} "
            f"{soc.ub_bytes} {soc.ub_reserve_bytes} {soc.aiv_cores}"
        )
    proc = subprocess.run([str(exe)], input="\n".join(lines) + "\n", capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise BuildError(f"the C++ host tiling failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
    out = proc.stdout.splitlines()
    if len(out) != len(calls):
        raise BuildError(f"the C++ host tiling answered {len(out)} of {len(calls)} calls")
    return [_parse(line) for line in out]


def _parse(line: str) -> HostKnobs:
    words = line.split()
    if words[0] == "hit":
        entry: int | None = int(words[1])
        words = words[2:]
    else:
        entry, words = None, words[1:]
    knobs = [int(w) for w in words[:4]]
    params = TilingParams(*(k or None for k in knobs))
    refitted = words[4] == "refit"
    if words[5] == "err":
        return HostKnobs(entry, params, refitted, None, None)
    values = tuple(int(w) for w in words[5:])
    return HostKnobs(entry, params, refitted, values[:-1], values[-1])
