"""The C++ host tiling core (kernel/op_host) computes exactly what tiling_model computes."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import compile_cpp_driver

from tiling_model import BadRequest, TilingParams, Variant, compute_tiling, known_socs, load_soc
from tiling_model.dtypes import DTYPE_ID, REDUCTION_ID
from tiling_model.variant import BROADCAST_FORMS, WEIGHT_FORMS, WRT_FORMS, broadcast_of

ROOT = Path(__file__).resolve().parents[2]
DTYPES = list(DTYPE_ID)
REDUCTIONS = list(REDUCTION_ID)


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compile_cpp_driver("tiling_core_driver.cpp", tmp_path_factory.mktemp("core"))


def random_cases(count: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    cases = []
    for _ in range(count):
        scheme = "seed" if rng.random() < 0.3 else "exact"
        dims = [int(d) for d in rng.integers(0, 3000, rng.integers(1, 4))]
        if rng.random() < 0.3:
            dims = [int(rng.integers(1, 10**10))]
        knob = lambda lo, hi, step=1: None if rng.random() < 0.4 else int(rng.integers(lo, hi)) * step  # noqa: E731
        cases.append(
            {
                "shape": dims,
                "dtype": DTYPES[rng.integers(len(DTYPES))],
                "reduction": REDUCTIONS[rng.integers(3)],
                "weight": "full" if scheme == "seed" else WEIGHT_FORMS[rng.integers(len(WEIGHT_FORMS))],
                "pos_weight": "none" if scheme == "seed" or rng.random() < 0.5 else BROADCAST_FORMS[rng.integers(3)],
                "wrt": "logit" if scheme == "seed" or rng.random() < 0.6 else WRT_FORMS[rng.integers(2)],
                "params": TilingParams(
                    knob(1, 200, 32), knob(1, 5), knob(1, 2000, 16 if rng.random() < 0.8 else 1), knob(1, 60)
                ),
                "soc": known_socs()[rng.integers(len(known_socs()))],
                "scheme": scheme,
            }
        )
    return cases


def python_line(c: dict) -> str:
    try:
        variant = Variant(c["dtype"], c["reduction"], c["weight"], c["pos_weight"], c["wrt"])
        t = compute_tiling(c["shape"], variant, c["params"], c["soc"], c["scheme"])
    except BadRequest:
        return "err"
    vals = [*t.fields.__dict__.values(), t.block_dim, t.tiling_key, *t.params.as_dict().values(), t.workspace_bytes]
    return "ok " + " ".join(str(v) for v in vals)


def cpp_input(c: dict) -> str:
    soc = load_soc(c["soc"])
    p = c["params"]
    n = 1
    for d in c["shape"]:
        n *= d
    classes = c["shape"][-1] if c["pos_weight"] == "last_dim" and c["shape"] else 0
    fields = [
        n,
        DTYPE_ID[c["dtype"]],
        REDUCTION_ID[c["reduction"]],
        BROADCAST_FORMS.index(c["weight"]),
        BROADCAST_FORMS.index(c["pos_weight"]),
        WRT_FORMS.index(c["wrt"]),
        classes,
        (c["shape"][-1] if c["shape"] else 1) if c["weight"] in ("last_dim", "rows") else 0,
        p.block_bytes or 0,
        p.buffer_num or 0,
        p.tile_bytes or 0,
        p.core_num or 0,
        soc.ub_bytes,
        soc.ub_reserve_bytes,
        soc.aiv_cores,
        int(c["scheme"] == "exact"),
    ]
    return " ".join(str(v) for v in fields)


@pytest.mark.parametrize("seed", [1, 2, 3, 4])  # 4 x 2,536 cases
def test_cpp_core_matches_tiling_model(driver: Path, seed: int) -> None:
    cases = random_cases(2500, seed)
    edge = [
        {
            "shape": s,
            "dtype": d,
            "reduction": "none",
            "weight": w,
            "pos_weight": "none",
            "wrt": "logit",
            "params": TilingParams(),
            "soc": "Ascend910B2",
            "scheme": sch,
        }
        for s in ([0], [1], [100], [129], [128], [1 << 33], [3, 0], [0, 7], [64, 3], [1, 1])
        for d in ("float32", "int16")
        for sch in ("seed", "exact")
        for w in (("full",) if sch == "seed" else WEIGHT_FORMS)
    ]
    cases += edge
    out = subprocess.run(
        [str(driver)], input="\n".join(cpp_input(c) for c in cases) + "\n", capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert len(out) == len(cases)
    oks = 0
    for c, got in zip(cases, out, strict=True):
        assert got == python_line(c), c
        oks += got.startswith("ok")
    assert oks > 0.4 * len(cases)  # many cases are tilings, not just matching errors


# ------------------------------------------------------------------ what the CANN TilingFunc reads

#: GetCoreMemSize(UB) as asc-devkit v8.5.0 platform_ascendc.cpp computes it from the SoC's INI
#: ub_size: 256 B (LOCAL_RESERV_SIZE) already left out on the Ascend910B family, nothing on 310B.
REPORTED_UB_LESS = {"Ascend910B": 256, "Ascend310B": 0}
FAMILY_ID = {"Ascend910B": 0, "Ascend310B": 1}


def run_driver(exe: Path, text: str) -> list[str]:
    return subprocess.run([str(exe)], input=text, capture_output=True, text=True, check=True).stdout.split("\n")


def test_host_ub_budget_from_what_the_platform_reports_is_the_models(tmp_path: Path) -> None:
    """The sixth finding: the host subtracted the 256 B twice on 910B (187904 B against the model's 188160 B)."""
    exe = compile_cpp_driver("host_inputs_driver.cpp", tmp_path)
    socs = [load_soc(s) for s in known_socs()]
    family = {s.name: "Ascend310B" if s.name.startswith("Ascend310B") else "Ascend910B" for s in socs}
    lines = "".join(f"ub {FAMILY_ID[family[s.name]]} {s.ub_bytes - REPORTED_UB_LESS[family[s.name]]}\n" for s in socs)
    out = run_driver(exe, lines)
    for s, got in zip(socs, out, strict=False):
        assert int(got) == s.ub_usable_bytes, (s.name, got)
    assert load_soc("Ascend910B2").ub_usable_bytes == 188160 and load_soc("Ascend310B1").ub_usable_bytes == 253696


def test_host_pos_weight_form_is_the_twin_runners(tmp_path: Path) -> None:
    """The TilingFunc reads the pos_weight form from the shapes as kernel.cpu does (tiling_model.pos_weight_of:
    the input's shape: full; [C] with C the last dim, or a single value when C is 1: last_dim; else refused)."""
    from kernel.cpu import _check_inputs

    exe = compile_cpp_driver("host_inputs_driver.cpp", tmp_path)
    cases = [((4, 5), (4, 5)), ((4, 5), (5,)), ((5,), (5,)), ((1, 5), (5,)), ((4, 5), (4,)), ((4, 5), (20,)),
             ((4, 5), (1, 5)), ((3, 1), (1,)), ((7,), (1,)), ((), (1,)), ((4, 5), None), ((4, 5), (4, 1)),
             ((2, 3, 4), (3, 4)), ((2, 3, 4), (1, 1, 4)), ((4, 5), (1,))]  # fmt: skip
    text = ""
    for shape, pw in cases:
        p = pw or ()
        text += f"pw {int(pw is not None)} {len(p)} {' '.join(map(str, p))} {len(shape)} {' '.join(map(str, shape))}\n"
    out = run_driver(exe, text)
    forms = {0: "none", 1: "full", 2: "last_dim"}
    for (shape, pw), got in zip(cases, out, strict=False):
        x = np.zeros(shape, np.float32)
        try:
            _, _, b = _check_inputs(x, x, x, None, None if pw is None else np.zeros(pw, np.float32), "none")
            form = b.form
        except ValueError:
            form = "err"
        parts = got.split()
        cpp = "err" if parts[0] == "err" else forms[int(parts[1])]
        assert cpp == form, (shape, pw, got)
        if form == "last_dim":
            assert int(parts[2]) == shape[-1]


def test_host_weight_form_is_broadcast_of(tmp_path: Path) -> None:
    """The TilingFunc maps any weight shape onto a form as tiling_model.broadcast_of (and so the twin
    runner, the service and PyTorch's broadcasting) does: the same form and period, the same refusals."""
    exe = compile_cpp_driver("host_inputs_driver.cpp", tmp_path)
    rng = np.random.default_rng(7)
    cases: list[tuple[tuple[int, ...], tuple[int, ...] | None]] = [
        ((4, 5), (5,)), ((4, 5), (4, 1)), ((4, 5), (1,)), ((4, 5), ()), ((4, 5), (1, 1)), ((4, 5), (4, 5)),
        ((2, 3, 4), (3, 4)), ((2, 3, 4), (2, 1, 4)), ((2, 3, 4), (2, 1, 1)), ((2, 3, 4), (2, 3, 1)),
        ((2, 3, 4), (1, 2, 3, 4)), ((2, 3, 4), (2, 2, 3, 4)), ((4, 5), (6,)), ((1, 5), (5,)), ((5, 1), (5, 1)),
        ((0, 5), (5,)), ((3, 0), (3, 1)), ((), ()), ((), (1,)), ((7,), (1,)), ((4, 5), None),
    ]  # fmt: skip
    for _ in range(300):  # random broadcastable shapes, and some that are not
        shape = tuple(int(d) for d in rng.integers(1, 4, rng.integers(1, 5)))
        w = tuple(d if rng.random() < 0.5 else 1 for d in shape[int(rng.integers(0, len(shape) + 1)) :])
        if rng.random() < 0.1 and w:
            w = (*w[:-1], w[-1] + 1)
        cases.append((shape, w))
    text = ""
    for shape, w in cases:
        ws = " ".join(map(str, w or ()))
        text += f"w {int(w is not None)} {len(w or ())} {ws} {len(shape)} {' '.join(map(str, shape))}\n"
    out = run_driver(exe, text)
    for (shape, w), got in zip(cases, out, strict=False):
        try:
            b = broadcast_of("weight", w, shape)
            want = f"ok {BROADCAST_FORMS.index(b.form)} {b.period}"
        except ValueError:
            want = "err"
        assert got == want, (shape, w)
