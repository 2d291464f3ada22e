"""Predicted speedup of reading a broadcast weight in its own form over materialising it first.

A user with a per-class weight [C] (or per-row [N, 1], or one value) who had to pass weight at the
input's full shape paid twice: a copy launch that writes N x C elements (``weight.expand(...).contiguous()``)
and one more input stream in BinaryCrossEntropyGrad. For a few shapes and dtypes this prints what the
service answers (``POST /tiling``'s resolver on the shipped tables: the tuned knobs, re-fitted at the
exact size; the broadcast forms re-fitted from the full form's buckets) and the model's predicted time:

- ``full``: the kernel alone, weight already at the input's shape;
- ``full + copy``: that plus the materialising copy, modelled as a 1-in-1-out elementwise kernel at the
  model's best tiling (its read side is the whole tensor: it over-counts a broadcast read, so this is
  an upper bound of the copy);
- the broadcast form (``last_dim`` for [C], ``rows`` for [N, 1], ``scalar`` for [1]) and its speedups.

Bytes are the model's HBM traffic (``predict_detail(...).bytes_moved``). Model predictions on the
cold-L2 default, not device measurements. Run: ``make bench-weight-forms`` (``--soc``).
"""

from __future__ import annotations

import argparse
import sys

from service.answers import CachedAnswers, Query
from service.config import SHIPPED_TABLES
from tiling_model import compute_tiling, known_socs, load_soc, predict_detail
from tiling_model.kernels import elementwise_kernel
from tiling_model.pick import _best_params
from tiling_model.tables import load_table
from tiling_model.tiling import tile_kernel
from tiling_model.variant import Variant, broadcast_of

SHAPES = ((4096, 1000), (32768, 1000), (262144, 128), (8192, 8192))
FORMS = (("last_dim", lambda s: (s[-1],)), ("rows", lambda s: (s[0], 1)), ("scalar", lambda s: (1,)))


def copy_us(n: int, dtype: str, soc_name: str) -> float:
    """The materialising copy: a 1-in-1-out elementwise kernel at the model's best tiling."""
    soc = load_soc(soc_name)
    k = elementwise_kernel(dtype, 1, 1, [], name="materialise")
    params = _best_params(k, soc, n, None, None)
    assert params is not None
    return predict_detail(tile_kernel(k, [n], params, soc)).predicted_us


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--soc", default="Ascend910B2", choices=known_socs())
    ap.add_argument("--dtypes", default="float32,float16")
    args = ap.parse_args(argv)
    tables = {p.stem: load_table(p) for p in SHIPPED_TABLES.glob("*.json")}
    resolver = CachedAnswers(tables)
    print(f"{args.soc}, reduction none, no pos_weight; the service's answer, the model's prediction (us)\n")
    print("| shape | dtype | weight | full us | full + copy us | form us | vs full | vs full + copy | HBM MB saved |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    for dtype in args.dtypes.split(","):
        for shape in SHAPES:
            n = shape[0] * shape[1]
            full_doc = resolver.resolve(Query(args.soc, shape, Variant(dtype, "none", "full"), ()))
            full = full_doc["predicted_us"]
            full_t = compute_tiling(list(shape), Variant(dtype, "none", "full"), None, args.soc)
            full_bytes = predict_detail(full_t).bytes_moved
            copy = copy_us(n, dtype, args.soc)
            for form, w_shape in FORMS:
                b = broadcast_of("weight", w_shape(shape), shape)
                assert b.form == form
                v = Variant(dtype, "none", form)
                doc = resolver.resolve(Query(args.soc, shape, v, (), b.period))
                t = compute_tiling(list(shape), v, None, args.soc, "exact", b.period or None)
                saved = (full_bytes - predict_detail(t).bytes_moved) / 1e6
                us = doc["predicted_us"]
                print(
                    f"| {list(shape)} | {dtype} | {form} {list(w_shape(shape))} | {full:.2f} | {full + copy:.2f} | "
                    f"{us:.2f} | {full / us:.2f}x | {(full + copy) / us:.2f}x | {saved:.1f} |"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
