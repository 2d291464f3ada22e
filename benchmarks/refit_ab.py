"""Two builds of the C++ re-fit, side by side in one process: is a change to the engine's headers faster?

A shared machine's speed drifts by tens of per cent between runs a minute apart, more than most changes to
the re-fit are worth; timing two binaries one after the other cannot tell them apart. Here both revisions
of ``tiling_model/include`` and ``kernel/op_host`` (A and B) are compiled into one binary
(``benchmarks/cpp/refit_ab_side.cpp`` twice, each in its own namespace) against one table header, and each
first call (``TunedKnobs``: lookup and re-fit) is timed on both sides in turn, the first side alternating,
the least of 3 x 3 timings kept. The two sides must pick the same knobs at every call (exit 1 if not).
The same revision on both sides measures 0.997-1.045 (code placement): a ratio inside that says nothing.

Run: ``.venv/bin/python benchmarks/refit_ab.py`` (A: HEAD, B: the working tree, the committed table
header); ``--a REV --b REV``, ``--table path/to/bce_grad_tuned_table.h`` (e.g. a device table's export:
``python -m tuner export-header --tables DIR --out H``), ``--cases 2000``. About a minute.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("tiling_model/include", "kernel/op_host")


def checkout(rev: str, into: Path) -> Path:
    """The engine's headers and the host sources as of ``rev`` ("" for the working tree), under ``into``."""
    for folder in SOURCES:
        dest = into / folder
        if not rev:
            shutil.copytree(ROOT / folder, dest)
            continue
        dest.mkdir(parents=True)
        names = subprocess.run(["git", "-C", str(ROOT), "ls-tree", "--name-only", f"{rev}:{folder}"],
                               check=True, capture_output=True, text=True).stdout.split()  # fmt: skip
        for name in names:
            blob = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{folder}/{name}"], check=True,
                                  capture_output=True).stdout  # fmt: skip
            (dest / name).write_bytes(blob)
    return into


def compile_side(side: str, tree: Path, table: Path, out: Path) -> Path:
    """refit_ab_side.cpp against ``tree``'s headers and ``table``, its names in namespace bce_grad_<side>."""
    shutil.copyfile(table, tree / "kernel/op_host/bce_grad_tuned_table.h")
    obj = out / f"side_{side}.o"
    subprocess.run(["g++", "-std=c++17", "-O2", "-ffp-contract=off", "-c", f"-Dbce_grad=bce_grad_{side.lower()}",
                    f"-DSIDE={side}", "-I", str(tree / "kernel/op_host"), "-I", str(tree / "tiling_model/include"),
                    str(ROOT / "benchmarks/cpp/refit_ab_side.cpp"), "-o", str(obj)], check=True)  # fmt: skip
    return obj


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--a", default="HEAD", help="revision of side A (default HEAD)")
    ap.add_argument("--b", default="", help="revision of side B (default: the working tree)")
    ap.add_argument("--table", type=Path, default=ROOT / "kernel/op_host/bce_grad_tuned_table.h",
                    help="the exported table header both sides are built with (default: the committed)")  # fmt: skip
    ap.add_argument("--cases", type=int, default=2000)
    a = ap.parse_args()
    if not a.table.is_file():
        ap.error(f"--table: {a.table} is not a file")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        objs = [compile_side(side, checkout(rev, out / side), a.table, out)
                for side, rev in (("A", a.a), ("B", a.b))]  # fmt: skip
        exe = out / "refit_ab"
        subprocess.run(["g++", "-O2", str(ROOT / "benchmarks/cpp/refit_ab.cpp"), *map(str, objs), "-o", str(exe)],
                       check=True)  # fmt: skip
        print(f"A: {a.a or 'the working tree'}, B: {a.b or 'the working tree'}, table {a.table}", flush=True)
        return subprocess.run([str(exe), str(a.cases)]).returncode


if __name__ == "__main__":
    sys.exit(main())
