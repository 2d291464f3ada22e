"""What the model picks and predicts over a fixed, seeded set of calls: a refactor's "the picks do not change".

For each SoC, seeded random variants, sizes and shapes: the default tiling's struct (exact, and seed where
the requirement's kernel runs the variant) and prediction, the
model's best tiling (``model_best``), the re-fit of a fixed tuned bucket (``refit``) and the best of the whole
space scored configuration by configuration (``score_space(...).best_index()``). Prints one digest per SoC and
writes every line to ``--out``; run it on two trees and ``diff`` the files. Uses only APIs both sides of the
one-source refactor (issue 38) have.

    python benchmarks/picks_digest.py --out /tmp/picks.jsonl [--cases 200]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
from pathlib import Path

from tiling_model import TilingParams, Variant, compute_tiling, load_soc, predict_detail
from tiling_model.kernels import bce_grad_kernel
from tiling_model.pick import model_best, refit
from tiling_model.space import score_space

SOCS = ("Ascend910B1", "Ascend910B2", "Ascend910B3", "Ascend910B4", "Ascend310B1")
TUNED = TilingParams(block_bytes=512, buffer_num=2, tile_bytes=8192, core_num=20)


def cases(rng: random.Random, count: int) -> list[tuple[Variant, list[int]]]:
    out: list[tuple[Variant, list[int]]] = []
    while len(out) < count:
        dtype = rng.choice(["float32", "float16", "bfloat16", "int32", "int16"])
        floats = dtype in ("float32", "float16", "bfloat16")
        reduction = rng.choice(["none", "sum", "mean"]) if floats else "none"
        weight = rng.choice(["none", "full", "scalar", "last_dim"])
        pos_weight = rng.choice(["none", "full", "last_dim"]) if floats else "none"
        classes = rng.choice([1, 3, 7, 64, 1000, 1031])
        rows = max(int(2 ** rng.uniform(0, 26)) // classes, 1)
        try:
            v = Variant(dtype, reduction, weight=weight, pos_weight=pos_weight)  # type: ignore[arg-type]
        except Exception:  # noqa: BLE001 - a combination the kernel does not run: draw again
            continue
        out.append((v, [rows, classes]))
    return out


def line(soc_name: str, v: Variant, shape: list[int]) -> dict[str, object]:
    soc = load_soc(soc_name)
    n, classes = shape[0] * shape[1], shape[1]
    period = classes if v.weight == "last_dim" else 0
    t = compute_tiling(shape, v, None, soc, "exact", period or None)
    best = model_best(n, v, soc, classes, period)
    again = refit(n, v, soc, TUNED, classes, period)
    kernel = bce_grad_kernel(v, "exact", classes, period)
    space = score_space(kernel, soc, n)
    seed = None
    if v.weight == "full" and v.pos_weight == "none" and v.wrt == "logit":  # what the requirement's kernel runs
        seed = list(compute_tiling(shape, v, None, soc, "seed").field_dict().values())
    return {
        "seed_fields": seed,
        "soc": soc_name,
        "variant": v.label(),
        "shape": shape,
        "default_fields": list(t.field_dict().values()),
        "block_dim": t.block_dim,
        "workspace_bytes": t.workspace_bytes,
        "ub_bytes": kernel.ub_bytes(t.params.tile_bytes, t.params.buffer_num),
        "prediction": predict_detail(t, soc).as_dict(),
        "model_best": best.params.as_dict(),
        "refit": again.as_dict(),
        "space_best": space.params(space.best_index()).__dict__,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--cases", type=int, default=200)
    ap.add_argument("--seed", type=int, default=38)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    drawn = cases(rng, args.cases)
    with args.out.open("w") as f:
        for soc in SOCS:
            digest = hashlib.sha256()
            for v, shape in drawn:
                text = json.dumps(line(soc, v, shape), sort_keys=True)
                digest.update(text.encode())
                f.write(text + "\n")
            print(f"{soc}: {len(drawn)} calls, digest {digest.hexdigest()[:16]}")


if __name__ == "__main__":
    main()
