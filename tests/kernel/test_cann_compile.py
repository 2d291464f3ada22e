"""The NPU sources compile against the real CANN 8.5.0 headers, as CANN's two build flows compile them.

`compile-check.sh` (in the shared toolchain folder: asc-devkit v8.5.0 include/ and impl/ in their
CPU-debug mode, metadef and ge host headers, declaration-only stand-ins for the closed parts) runs
g++ -fsyntax-only, which instantiates every template the kernel uses against the real signatures.
The kernel is checked in the kernel-launch flow (no generated tiling macros) and in the custom-op
flow (the generated GET_TILING_DATA_WITH_STRUCT, one binary per fixed dtype), for A2 (arch 2201)
and 310B (arch 3002); the host file as the tiling and the proto library. Negative controls: the
mutations that broke the build before (or would break it on a device) must fail here too.

Where the toolchain folder is absent (a clone without ../shared) every test here skips and says why.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from kernel.cpu import DTYPE_CTYPES, KernelBuildError, compile_twin

ROOT = Path(__file__).resolve().parents[2]
TOOLCHAIN = Path(os.environ.get("BCETUNE_CANN_TOOLCHAIN") or ROOT.parent / "shared" / "toolchain" / "cann-8.5.0")
SCRIPT = TOOLCHAIN / "compile-check.sh"
HOST_PLATFORM_STUB = TOOLCHAIN / "stubs" / "host_platform"
KERNEL = ROOT / "kernel" / "op_kernel" / "bce_grad.cpp"
#: Both kernel entries: the requirement's BinaryCrossEntropyGrad and its fused BCEWithLogits sibling (float only)
ENTRIES = ("bce_grad.cpp", "bce_with_logits_fused.cpp")
OP_HOST = ROOT / "kernel" / "op_host"
ENGINE_INCLUDE = ROOT / "tiling_model" / "include"  # the tiling struct, host tiling and engine: build.sh copies them
#: the ops-nn op_host layout: per op the OpDef, the TilingFunc and the shape inference in their own files
HOST_OPS = {"BceGrad": "bce_grad", "BceWithLogitsFused": "bce_with_logits_fused"}
HOST_SOURCES = tuple(f"{stem}_{part}.cpp" for stem in HOST_OPS.values() for part in ("def", "tiling", "infershape"))
HOST = OP_HOST / "bce_grad_tiling.cpp"
RUN = {"checks": 0}

pytestmark = [
    pytest.mark.toolchain,
    pytest.mark.skipif(
        not SCRIPT.is_file() or shutil.which("g++") is None,
        reason=f"no CANN 8.5.0 toolchain headers at {TOOLCHAIN} (or no g++): the NPU sources are not compile-checked",
    ),
]


def compile_check(what: str, source: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """compile-check.sh; a kernel finds the tiling struct below it, as kernel/CMakeLists.txt and build.sh give it."""
    RUN["checks"] += 1
    env = dict(os.environ, MAXERR="5")
    if what == "kernel":
        args = (*args, f"-I{ENGINE_INCLUDE}")
    return subprocess.run(
        ["bash", str(SCRIPT), what, str(source), *args], capture_output=True, text=True, env=env, check=False
    )


def errors(proc: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in proc.stderr.splitlines() if re.search(r"\berror\b", line)]


def op_flags(dtype: str) -> tuple[str, ...]:
    """What the msopgen build adds: the flow define (kernel/build.sh) and the per-binary dtype."""
    return ("-DBCE_GRAD_CUSTOM_OP=1", f"-DDTYPE_LOGITS={DTYPE_CTYPES[dtype]}")


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("arch", ["a2", "310b"])
def test_kernel_compiles_in_the_kernel_launch_flow(arch: str, entry: str) -> None:
    proc = compile_check("kernel", KERNEL.parent / entry, arch, "launch")
    assert proc.returncode == 0, "\n".join(errors(proc)) or proc.stderr[-3000:]


@pytest.mark.parametrize("arch", ["a2", "310b"])
@pytest.mark.parametrize("dtype", list(DTYPE_CTYPES))
def test_kernel_compiles_in_the_custom_op_flow_for_every_fixed_dtype(arch: str, dtype: str) -> None:
    proc = compile_check("kernel", KERNEL, arch, "op", *op_flags(dtype))
    assert proc.returncode == 0, "\n".join(errors(proc)) or proc.stderr[-3000:]


@pytest.mark.parametrize("arch", ["a2", "310b"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_the_fused_entry_compiles_in_the_custom_op_flow_for_every_float_dtype(arch: str, dtype: str) -> None:
    """Its Exp, Ln, Abs and ReduceSum are the real headers' (the twin's stand-ins cannot vouch for them)."""
    proc = compile_check("kernel", KERNEL.parent / "bce_with_logits_fused.cpp", arch, "op", *op_flags(dtype))
    assert proc.returncode == 0, "\n".join(errors(proc)) or proc.stderr[-3000:]


@pytest.mark.parametrize("mode", ["tiling", "proto"])
@pytest.mark.parametrize("source", HOST_SOURCES)
def test_host_compiles_as_tiling_and_proto_library(source: str, mode: str) -> None:
    """Only the closed platform_infos_def.h is stood in; everything else is CANN's own header."""
    proc = compile_check("host", OP_HOST / source, mode, f"-I{HOST_PLATFORM_STUB}", f"-I{ENGINE_INCLUDE}")
    assert proc.returncode == 0, "\n".join(errors(proc)) or proc.stderr[-3000:]


def test_op_host_holds_the_ops_nn_files_and_one_registration_each() -> None:
    """Every .cpp in op_host/ is built into the op package (msopgen's CMake globs them): per op exactly its
    three files, the OpDef registered once (OP_ADD), the TilingFunc and the shape inference once each, by op
    type, each in its own file; and the msopgen description names the same ops, inputs and outputs in order."""
    assert sorted(p.name for p in OP_HOST.glob("*.cpp")) == sorted(HOST_SOURCES)
    text = {name: (OP_HOST / name).read_text() for name in HOST_SOURCES}
    everything = "".join(text.values())
    for op, stem in HOST_OPS.items():
        for macro, part in (("OP_ADD", "def"), ("IMPL_OP_OPTILING", "tiling"), ("IMPL_OP_INFERSHAPE", "infershape")):
            assert len(re.findall(rf"{macro}\(\s*{op}\s*\)", everything)) == 1, (macro, op)
            assert re.search(rf"{macro}\(\s*{op}\s*\)", text[f"{stem}_{part}.cpp"]), (macro, op)
    described = json.loads((OP_HOST / "bce_grad.json").read_text())
    assert [d["op"] for d in described] == list(HOST_OPS)
    for d in described:
        defined = text[f"{HOST_OPS[d['op']]}_def.cpp"]
        for key, call in (("input_desc", "Input"), ("output_desc", "Output")):
            names = [p["name"] for p in d[key]]
            declared = re.findall(rf'this->{call}\("(\w+)"\)', defined)
            loops = re.findall(rf"for \(const char\* \w+ : \{{([^}}]*)\}}\) \{{?\s*this->{call}\(", defined)
            declared += [n for group in loops for n in re.findall(r'"(\w+)"', group)]
            assert sorted(declared) == sorted(names), (d["op"], key)


def test_the_tiling_func_uses_the_tuned_tiling_the_parity_test_checks() -> None:
    """Both TilingFuncs' knobs come from TunedTiling (bce_grad_tuned_tiling.h), the function
    tests/kernel/test_tuned_header.py compares with the service, through the one context reader, and from
    nothing else; the fused op asks for the fused mode's entries."""
    context = (OP_HOST / "bce_grad_tiling_context.h").read_text()
    assert '#include "bce_grad_tuned_tiling.h"' in context
    assert re.search(r"bce_grad::TunedTiling\(", context) and "ComputeTiling(" not in context
    for stem in HOST_OPS.values():
        text = (OP_HOST / f"{stem}_tiling.cpp").read_text()
        assert '#include "bce_grad_tiling_context.h"' in text and "WriteTunedTiling(" in text
        assert "ComputeTiling(" not in text and "TunedTiling(soc" not in text
    assert "v->mode = bce_grad::Mode::Fused;" in (OP_HOST / "bce_with_logits_fused_tiling.cpp").read_text()


@pytest.mark.parametrize(
    "header",
    [*sorted(ENGINE_INCLUDE.glob("*.h")), OP_HOST / "bce_grad_tuned_table.h", OP_HOST / "bce_grad_tuned_tiling.h"],
    ids=lambda p: p.name,
)  # fmt: skip
def test_pure_cpp_host_headers_compile_on_their_own_with_strict_warnings(header: Path) -> None:
    """The headers the TilingFunc shares with the tests need no CANN header and no other include first."""
    cxx = shutil.which("g++") or "g++"
    RUN["checks"] += 1
    proc = subprocess.run(
        [
            cxx,
            "-std=c++17",
            "-fsyntax-only",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-I",
            str(ENGINE_INCLUDE),
            "-x",
            "c++",
            str(header),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr


# ------------------------------------------------------------------ negative controls


def mutated_kernel(tmp_path: Path, file: str, old: str, new: str) -> Path:
    """A copy of op_kernel/ with one edit in ``file``; returns the copy's entry source."""
    dst = tmp_path / "op_kernel"
    shutil.copytree(KERNEL.parent, dst)
    text = (dst / file).read_text()
    assert old in text, f"mutation target {old!r} not found in {file}: update the negative control"
    (dst / file).write_text(text.replace(old, new, 1))
    return dst / KERNEL.name


def mutated_host(tmp_path: Path, old: str, new: str) -> Path:
    """A copy of op_host/ (and the op_kernel/ it includes) with one edit in the TilingFuncs' context reader;
    returns BceGrad's TilingFunc in the copy."""
    shutil.copytree(HOST.parent, tmp_path / "op_host")
    shutil.copytree(KERNEL.parent, tmp_path / "op_kernel")
    edited = tmp_path / "op_host" / "bce_grad_tiling_context.h"
    text = edited.read_text()
    assert old in text, f"mutation target {old!r} not found: update the negative control"
    edited.write_text(text.replace(old, new, 1))
    return tmp_path / "op_host" / HOST.name


def twin_build_of(tmp_path: Path, entry: Path) -> None:
    """Compile the CPU twin's launcher around ``entry`` (the launch flow); KernelBuildError if it fails."""
    launcher = tmp_path / "twin_entry.cpp"
    launcher.write_text(
        (ROOT / "kernel" / "cpu" / "twin_entry.cpp").read_text().replace("../op_kernel/bce_grad.cpp", str(entry))
    )
    compile_twin(launcher, tmp_path / "twin.so")


def test_launch_flow_has_no_generated_tiling_macro(tmp_path: Path) -> None:
    """The first finding: GET_TILING_DATA_WITH_STRUCT outside a custom-op build does not compile in
    the launch flow, with the real headers and with the CPU twin alike; the op flow still takes it."""
    entry = mutated_kernel(tmp_path, KERNEL.name, "#if defined(BCE_GRAD_CUSTOM_OP)", "#if 1")
    proc = compile_check("kernel", entry, "a2", "launch")
    assert proc.returncode != 0
    assert any("GET_TILING_DATA_WITH_STRUCT" in line for line in errors(proc)), proc.stderr[-2000:]
    assert compile_check("kernel", entry, "a2", "op", *op_flags("float32")).returncode == 0
    with pytest.raises(KernelBuildError, match="GET_TILING_DATA_WITH_STRUCT"):
        twin_build_of(tmp_path, entry)


def test_cast_mode_the_a2_headers_lack_fails_here_and_in_the_twin(tmp_path: Path) -> None:
    entry = mutated_kernel(tmp_path, "bce_grad.h", "RoundMode::CAST_RINT", "RoundMode::CAST_HYBRID")
    proc = compile_check("kernel", entry, "a2", "launch")
    assert proc.returncode != 0 and any("CAST_HYBRID" in line for line in errors(proc)), proc.stderr[-2000:]
    with pytest.raises(KernelBuildError, match="CAST_HYBRID"):
        twin_build_of(tmp_path, entry)


@pytest.mark.parametrize(("arch", "has_kernel_type"), [("a2", True), ("310b", False)])
def test_kernel_type_is_declared_on_a2_only(arch: str, has_kernel_type: bool) -> None:
    """The op compiler refuses a kernel type on 310B (kernel_info_infer.py): its precompile pass
    (-E with __CHECK_FEATURE_AT_PRECOMPILE, the real macros) must find one on A2 and none on 310B,
    and the registered tiling struct on both."""
    proc = compile_check("kernel", KERNEL, arch, "op", *op_flags("float32"), "-E", "-D__CHECK_FEATURE_AT_PRECOMPILE")
    assert proc.returncode == 0, "\n".join(errors(proc))
    assert ("__enable_feature_for_compile_default = KERNEL_TYPE_AIV_ONLY" in proc.stdout) is has_kernel_type
    assert re.search(r"__enable_custom_tiling\s*BceGradTilingData\s*=\s*default;", proc.stdout)


def test_host_without_the_platform_header_does_not_compile(tmp_path: Path) -> None:
    """The fourth finding: GetPlatformRes needs platform/platform_infos_def.h (forward-declared elsewhere)."""
    src = mutated_host(tmp_path, '#include "platform/platform_infos_def.h"', "")
    proc = compile_check("host", src, "tiling", f"-I{HOST_PLATFORM_STUB}", f"-I{ENGINE_INCLUDE}")
    assert proc.returncode != 0 and any("incomplete type" in line for line in errors(proc)), proc.stderr[-2000:]


def test_host_with_a_wrong_context_call_does_not_compile(tmp_path: Path) -> None:
    src = mutated_host(tmp_path, "context->GetTilingData<BceGradTilingData>()", "context->GetTilingData()")
    proc = compile_check("host", src, "tiling", f"-I{HOST_PLATFORM_STUB}", f"-I{ENGINE_INCLUDE}")
    assert proc.returncode != 0 and errors(proc)
