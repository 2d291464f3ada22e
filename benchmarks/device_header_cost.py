"""What a device table's learned residual costs the build's first call at a size, side by side.

A device-loop sweep on a stand-in device (``--device-shape realised --seed 3`` by default: one whose sweep
learns a residual), its table exported twice: as fitted (the residual in the knob correction's place) and
with the residual taken out (the same entries and hardware, its hash recomputed). Both headers are built
into ``benchmarks/cpp/tuned_tiling_bench.cpp`` (what ``make bench-tiling-cpp TABLE_HEADER=...`` runs) and
run one after the other, twice, on the same random calls: the first call at a size re-fits with the
table's profile, so this measures the residual's floors in the branch and bound.

Run: ``.venv/bin/python benchmarks/device_header_cost.py`` (``--keys 40 --trials 16 --calls 2000``; about
two minutes); ``--keep DIR`` keeps both headers (``DIR/fitted``, ``DIR/no_residual``) for
``benchmarks/refit_ab.py --table``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import optuna
from search_efficiency import pick_keys

from tiling_model import load_soc
from tiling_model.soc import profile_from_json
from tuner.export_header import export_header
from tuner.storage import open_storage
from tuner.sweep import run_sweep
from tuner.synthetic import DEVICE_SHAPES, SyntheticBackend, SyntheticDevice

ROOT = Path(__file__).resolve().parent.parent
SOC = "Ascend910B2"


def build(header: Path, out: Path) -> Path:
    """The microbenchmark built against ``header`` in place of the committed table."""
    op_host = out / "op_host"
    shutil.copytree(ROOT / "kernel" / "op_host", op_host)
    shutil.copyfile(header, op_host / "bce_grad_tuned_table.h")
    exe = out / "tuned_tiling_bench"
    source = ROOT / "benchmarks" / "cpp" / "tuned_tiling_bench.cpp"
    subprocess.run(["g++", "-std=c++17", "-O2", "-ffp-contract=off", "-Wall", "-Wextra", "-Werror", "-I", str(op_host),
                    "-I", str(ROOT / "tiling_model" / "include"), str(source), "-o", str(exe)], check=True)  # fmt: skip
    return exe


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device-shape", choices=DEVICE_SHAPES, default="realised")
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--keys", type=int, default=40)
    ap.add_argument("--trials", type=int, default=16)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--keep", type=Path, help="copy both exported headers here (e.g. for benchmarks/refit_ab.py)")
    a = ap.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    device = SyntheticDevice(load_soc(SOC), a.seed, shape=a.device_shape)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        fitted, stripped = root / "fitted", root / "no_residual"
        fitted.mkdir()
        stripped.mkdir()
        storage = open_storage(f"sqlite:///{root / 'studies.db'}")
        table = run_sweep(pick_keys(a.keys), SyntheticBackend(device, seed=2), storage, a.trials,
                          fitted / f"{SOC}.json", False)  # fmt: skip
        residual = table.profile().residual
        if residual.identity:
            print(f"{a.device_shape}:{a.seed}: the sweep learnt no residual; nothing to compare", file=sys.stderr)
            return 1
        doc = json.loads((fitted / f"{SOC}.json").read_text())
        del doc["device"]["profile"]["residual"]
        doc["soc_profile_hash"] = profile_from_json(doc["device"]["profile"]).profile_hash
        (stripped / f"{SOC}.json").write_text(json.dumps(doc))
        exes = {}
        for name, tables in (("without the residual", stripped), ("with the residual", fitted)):
            export_header(tables, tables / "bce_grad_tuned_table.h")
            if a.keep:
                kept = a.keep / tables.name
                kept.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(tables / "bce_grad_tuned_table.h", kept / "bce_grad_tuned_table.h")
            exes[name] = build(tables / "bce_grad_tuned_table.h", tables)
        moved = sum(1 for b in residual.beta if b)
        print(f"{SOC} stand-in {a.device_shape}:{a.seed}, {a.keys} keys at {a.trials} trials; residual: "
              f"{moved} levels moved, penalty {residual.penalty}")  # fmt: skip
        for run in (1, 2):
            for name, exe in exes.items():
                out = subprocess.run([str(exe), str(a.calls), "1"], capture_output=True, text=True, check=True).stdout
                print(f"run {run}, {name}:")
                print("\n".join("  " + line for line in out.splitlines()[:2]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
