"""What real TILING_KEY_IS specialisations would cost: code size and compile time of the kernel with
the variant decoded at run time (what ships: one kernel body per dtype x BUFFER_NUM) against one
body per tiling key (the variant flags as compile-time constants, dead branches dropped).

No NPU compiler here, so both are compiled by g++ -O2 against the CPU twin's kernel_operator.h (a
stand-in for bisheng: the ratio of kernel bodies and of their code is what carries over, not the
bytes). The specialised source is derived from op_kernel/bce_grad.h at run time (the class takes
the key as a template parameter; ``v_.`` becomes a constexpr ``kKey.``), so it follows the kernel.

    .venv/bin/python benchmarks/tiling_key_binary_size.py
"""

from __future__ import annotations

import re
import subprocess
import tempfile
import time
from pathlib import Path

from tiling_model.dtypes import FLOAT_DTYPES, valid_combinations
from tiling_model.kernels import bce_grad_kernel
from tiling_model.tiling import tiling_key
from tiling_model.variant import Variant

ROOT = Path(__file__).resolve().parents[1]
CTYPE = {"float32": "float", "float16": "half", "bfloat16": "bfloat16_t", "int32": "int32_t", "int16": "int16_t"}
FLAGS = ["g++", "-std=c++20", "-O2", "-ffp-contract=off", "-fPIC", "-c", "-w"]


def every_key() -> dict[int, str]:
    """Tiling key -> dtype for every variant and BUFFER_NUM the kernel accepts (sum and mean share a key)."""
    keys: dict[int, str] = {}
    for dtype, reduction in valid_combinations():
        for wrt in ("logit", "probability") if dtype in FLOAT_DTYPES else ("logit",):
            for pw in ("none", "full", "last_dim") if wrt == "logit" else ("none",):
                for weight in (True, False):
                    variant = Variant(dtype, reduction, weight, pw, wrt)
                    kernel = bce_grad_kernel(variant, "exact", 1)
                    for bn in kernel.allowed_buffer_nums():
                        keys[tiling_key(variant, bn)] = dtype
    return keys


def specialised_header(text: str) -> str:
    text = text.replace("__aicore__ inline Variant DecodeKey(int64_t key) {\n    Variant v;",
                        "constexpr __aicore__ inline Variant DecodeKey(int64_t key) {\n    Variant v{};")  # fmt: skip
    head = "template <typename T, int32_t BUFFER_NUM>\nclass KernelBceGrad {"
    assert head in text, "kernel class header changed: update the benchmark"
    text = text.replace(
        head,
        "template <typename T, int32_t BUFFER_NUM, int64_t KEY>\nclass KernelBceGrad {\n"
        "    static constexpr Variant kKey = DecodeKey(KEY);",
    )
    text = text.replace("v_ = v;", "(void)v;").replace("v_.", "kKey.")
    cut = text.index("/** Instantiate the class for the key's BUFFER_NUM")
    return text[:cut] + "}  // namespace bce_grad_kernel\n\n#endif\n"


def specialised_entry(keys: dict[int, str]) -> str:
    cases = "\n".join(
        f"        case {k}: bce_grad_kernel::RunKey<{CTYPE[d]}, {k}>(g, p, y, w, pw, z, ws, t); break;"
        for k, d in sorted(keys.items())
    )
    return f"""
#include "bce_grad_specialised.h"
namespace bce_grad_kernel {{
template <typename T, int64_t KEY>
void RunKey(GM_ADDR g, GM_ADDR p, GM_ADDR y, GM_ADDR w, GM_ADDR pw, GM_ADDR z, GM_ADDR ws,
            const BceGradTilingData& t) {{
    TPipe pipe;
    KernelBceGrad<T, static_cast<int32_t>(DecodeKey(KEY).bufferNum), KEY> op;
    op.Init(g, p, y, w, pw, z, ws, t, DecodeKey(KEY), &pipe);
    op.Process();
}}
}}  // namespace bce_grad_kernel
extern "C" void bce_grad(GM_ADDR g, GM_ADDR p, GM_ADDR y, GM_ADDR w, GM_ADDR pw, GM_ADDR z, GM_ADDR ws,
                         GM_ADDR tiling) {{
    BceGradTilingData t;
    bce_grad_kernel::LoadTiling(&t, tiling);
    switch (t.tilingKey) {{
{cases}
        default: break;
    }}
}}
"""


def compile_size(src: Path, out: Path, include: list[Path]) -> tuple[int, float]:
    start = time.perf_counter()
    cmd = [*FLAGS, *(f"-I{d}" for d in include), str(src), "-o", str(out)]
    subprocess.run(cmd, check=True)
    took = time.perf_counter() - start
    size = subprocess.run(["size", "-A", str(out)], capture_output=True, text=True, check=True).stdout
    text = sum(int(m.group(1)) for m in re.finditer(r"^\.text\S*\s+(\d+)", size, re.M))
    return text, took


def main() -> None:
    keys = every_key()
    cpu_dir, kernel_dir = ROOT / "kernel" / "cpu", ROOT / "kernel" / "op_kernel"
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        (t / "bce_grad_specialised.h").write_text(specialised_header((kernel_dir / "bce_grad.h").read_text()))
        (t / "specialised.cpp").write_text(specialised_entry(keys))
        base_text, base_s = compile_size(kernel_dir / "bce_grad.cpp", t / "base.o", [cpu_dir, kernel_dir])
        spec_text, spec_s = compile_size(t / "specialised.cpp", t / "spec.o", [t, cpu_dir, kernel_dir])
    bodies = len(CTYPE) * 4  # Run instantiates KernelBceGrad<T, 1..4> for each dtype of the entry's switch
    print("g++ -O2 against the CPU twin (a stand-in for the NPU compiler: compare ratios, not bytes;")
    print("the .text includes the twin's own runtime, the same in both)")
    print(f"{'kernel':<46}{'bodies':>8}{'.text bytes':>14}{'compile s':>11}")
    print(f"{'run-time variant (ships: key in the struct)':<46}{bodies:>8}{base_text:>14,}{base_s:>11.1f}")
    print(f"{'one body per TILING_KEY_IS key':<46}{len(keys):>8}{spec_text:>14,}{spec_s:>11.1f}")
    print(f"ratio: {spec_text / base_text:.1f}x the code, {spec_s / base_s:.1f}x the compile time")


if __name__ == "__main__":
    main()
