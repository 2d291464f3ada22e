"""The torch_npu extension (kernel/npu_ext) builds through kernel/CMakeLists.txt against the real
torch and torch_npu headers and libraries (the torch-npu 2.13.0 wheel from the package index, unpacked by
make test beside the environment on x86_64 and put on PYTHONPATH for CMake only: installed, it would make
`import torch` fail on this host without CANN).

No CANN here: a stand-in ``ascendc.cmake`` takes the place of CANN's ascendc_library (it compiles
nothing for the NPU) and provides the ``aclrtlaunch_bce_grad.h`` that CANN's kernel-launch build
generates, written from the kernel entry's own parameter list (every GM_ADDR becomes ``void*``,
as asc-devkit's extract_host_stub.py does), so a binding that passes the wrong arguments fails to
compile. Everything else (CMake's torch/ABI discovery, the extension's compile and link against
libtorch_npu) is the real thing.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest
from conftest import TORCH_NPU_SITE, npu_user_env

ROOT = Path(__file__).resolve().parents[2]
KERNEL_ENTRY = ROOT / "kernel" / "op_kernel" / "bce_grad.cpp"

pytestmark = [
    pytest.mark.toolchain,
    pytest.mark.skipif(
        npu_user_env() is None or shutil.which("cmake") is None or shutil.which("g++") is None,
        reason="the torch_npu wheel (make test, x86_64), cmake or g++ missing: the extension is not compiled here",
    ),
]

FAKE_ASCENDC_CMAKE = """\
# Stand-in for CANN's ascendc.cmake (tests only): no NPU compiler here, so ascendc_library builds
# nothing and exports the launch header that CANN's build would generate.
set(FAKE_ASCENDC_DIR ${CMAKE_CURRENT_LIST_DIR})
function(ascendc_library name kind)
    add_library(${name} INTERFACE)
    target_include_directories(${name} INTERFACE ${FAKE_ASCENDC_DIR}/generated)
endfunction()
function(ascendc_include_directories)
endfunction()
"""


def launch_header(entry: str = "bce_grad") -> str:
    """aclrtlaunch_<entry>.h as the kernel-launch build generates it from the kernel entry's signature."""
    text = (KERNEL_ENTRY.parent / f"{entry}.cpp").read_text()
    m = re.search(r'extern "C" __global__ __aicore__ void ' + entry + r"\(([^)]*)\)", text)
    assert m, "kernel entry not found"
    params = [p.split()[-1] for p in m.group(1).replace("\n", " ").split(",")]
    assert all(p.strip().startswith("GM_ADDR") for p in m.group(1).split(",")), "only GM_ADDR parameters expected"
    args = ", ".join(f"void* {p}" for p in params)
    return (
        '#include "acl/acl_base.h"\n'
        f'extern "C" uint32_t aclrtlaunch_{entry}(uint32_t blockDim, aclrtStream stream, {args});\n'
        "#define ACLRT_LAUNCH_KERNEL(kernel_func) aclrtlaunch_##kernel_func\n"
    )


def test_extension_builds_with_cmake_against_real_torch_npu(tmp_path: Path) -> None:
    cann = tmp_path / "cann"
    cmake_dir = cann / "compiler" / "tikcpp" / "ascendc_kernel_cmake"
    (cmake_dir / "generated").mkdir(parents=True)
    (cmake_dir / "ascendc.cmake").write_text(FAKE_ASCENDC_CMAKE)
    for entry in ("bce_grad", "bce_with_logits_fused"):
        (cmake_dir / "generated" / f"aclrtlaunch_{entry}.h").write_text(launch_header(entry))
    build = tmp_path / "build"
    python = Path(sysconfig.get_paths()["scripts"]) / "python"
    configure = subprocess.run(
        ["cmake", "-S", str(ROOT / "kernel"), "-B", str(build), f"-DASCEND_CANN_PACKAGE_PATH={cann}",
         f"-DPython3_EXECUTABLE={python}", "-DCMAKE_BUILD_TYPE=Release"],
        capture_output=True, text=True, check=False, env=npu_user_env(),
    )  # fmt: skip
    assert configure.returncode == 0, configure.stdout[-2000:] + configure.stderr[-3000:]
    made = subprocess.run(
        ["cmake", "--build", str(build), "--target", "bce_grad_npu", "--", "VERBOSE=1"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert made.returncode == 0, made.stdout[-4000:] + made.stderr[-4000:]
    import torch

    abi = int(torch.compiled_with_cxx11_abi())
    assert f"-D_GLIBCXX_USE_CXX11_ABI={abi}" in made.stdout  # taken from the torch build, not hard-coded
    ext = next(build.glob("bce_grad_npu*.so"))
    undefined = subprocess.run(
        ["nm", "-D", "--undefined-only", str(ext)], capture_output=True, text=True, check=True
    ).stdout
    for entry in ("aclrtlaunch_bce_grad", "aclrtlaunch_bce_with_logits_fused"):  # the kernel library's, on CANN
        assert entry in undefined
    needed = subprocess.run(["readelf", "-d", str(ext)], capture_output=True, text=True, check=True).stdout
    assert "libtorch_npu.so" in needed
    # every torch_npu symbol the binding uses exists in the installed libtorch_npu (it links, by name)
    npu_lib = TORCH_NPU_SITE / "torch_npu" / "lib" / "libtorch_npu.so"
    defined = subprocess.run(
        ["nm", "-D", "--defined-only", str(npu_lib)], capture_output=True, text=True, check=True
    ).stdout
    wanted = [line.split()[-1] for line in undefined.splitlines() if "c10_npu" in line]
    assert wanted, "the binding should use torch_npu's stream API"
    assert all(sym in defined for sym in wanted), [s for s in wanted if s not in defined]
    # and every other symbol it needs is torch's, the interpreter's or the C/C++ runtime's: the
    # operator's PrivateUse1 registration (torch::Library) and the tiling cache link on an NPU host
    torch_lib = Path(torch.__file__).parent / "lib"
    for lib in ("libtorch_cpu.so", "libc10.so", "libtorch_python.so", "libtorch.so"):
        defined += subprocess.run(
            ["nm", "-D", "--defined-only", str(torch_lib / lib)], capture_output=True, text=True, check=True
        ).stdout
    defined_names = {line.split()[-1].split("@")[0] for line in defined.splitlines() if line.strip()}
    runtime = ("GLIBC", "GCC_", "CXXABI", "GLIBCXX")
    missing = [
        name
        for line in undefined.splitlines()
        if line.strip()
        for name in [line.split()[-1]]
        if not any(f"@{r}" in name for r in runtime)
        and not name.startswith(("Py", "_Py", "aclrtlaunch_", "__gmon_start__", "_ITM_", "__cxa"))
        and name.split("@")[0] not in defined_names
    ]
    assert not missing, missing[:20]
    assert b"bcetune" in ext.read_bytes()  # the operator's namespace, registered as the library loads
