"""Twin self-tests: each fault kind, provoked by a small deliberately wrong kernel, is reported
with the core and the offending operation; code the NPU compiler rejects does not compile here."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest

from kernel import cpu

ROOT = Path(__file__).resolve().parents[2]

CASES = {
    "ub_overflow": r"core 0: InitBuffer\(queue\) of 100000 B .* exceeds the usable UB of 188160 B",
    "queue_limit": r"max buffer number in same queue position is 8: VECIN would have 10",
    "datacopy_not_32B": r"DataCopy GM->UB of 7 float elements \(28 B\) is not a multiple of 32 B",
    "ub_unaligned": r"Adds: dst UB address 12 is not 32-byte aligned",
    "gm_out_of_bounds_read": r"DataCopy GM->UB reads 'x' elements \[64, 128\) but the tensor has 100 elements",
    "gm_out_of_bounds_write": r"DataCopy UB->GM writes 'x' elements \[96, 104\) but the tensor has 100 elements",
    "deque_empty": r"DeQue on an empty VECIN queue #0",
    "enque_full": r"EnQue on a full VECIN queue #0 \(depth 1, 1 waiting\)",
    "double_free": r"FreeTensor twice on VECIN queue #0",
    "leak": r"tensor still allocated at the end: VECOUT queue #0 buffer 0",
    "cast_unsupported": r"Cast float -> bfloat16_t with CAST_NONE is not supported on A2",
    "alloc_no_free_buffer": r"AllocTensor on VECIN queue #0: all 1 buffers are in use",
    "partial_overlap": r"Add: destination and source overlap partially",
    "event_pairing": r"WaitFlag on event \d+ id 0 with no SetFlag before it",
    "stale_tensor": r"Duplicate on a tensor of VECIN queue #0 buffer 0 after FreeTensor",
}


@pytest.fixture(scope="module")
def faults_lib(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    out = tmp_path_factory.mktemp("twin") / "twin_faults.so"
    cpu.compile_twin(ROOT / "tests" / "kernel" / "cpp" / "twin_faults.cpp", out)
    lib = ctypes.CDLL(str(out))
    lib.run_fault_case.restype = ctypes.c_int
    lib.run_fault_case.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong]
    return lib


def run_case(lib: ctypes.CDLL, name: str) -> tuple[int, str]:
    err = ctypes.create_string_buffer(1024)
    rc = lib.run_fault_case(name.encode(), err, len(err))
    return rc, err.value.decode()


def test_a_correct_kernel_runs_clean(faults_lib: ctypes.CDLL) -> None:
    assert run_case(faults_lib, "clean") == (0, "")


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_fault_is_reported_with_core_and_operation(faults_lib: ctypes.CDLL, name: str) -> None:
    rc, message = run_case(faults_lib, name)
    assert rc == 1, f"{name} was not caught"
    kind = name.removesuffix("_read").removesuffix("_write")
    assert message.startswith(f"[{kind}] core 0: "), message
    assert __import__("re").search(CASES[name], message), message


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ("Add(bf, bf, bf, 16);", "A2 supports int16_t, half, int32_t and float only"),
        # the scalar must be exactly half: no implicit float (as the real template deduction refuses it)
        ("Muls(h, h, 2.0f, 16);", r"deduced conflicting types for parameter .const T. \(.half. and .float.\)"),
        ("Div(i, i, i, 16);", "A2 supports half and float only"),
    ],
)
def test_code_the_npu_rejects_does_not_compile(tmp_path: Path, body: str, needle: str) -> None:
    src = tmp_path / "bad.cpp"
    src.write_text(
        '#include "kernel_operator.h"\nusing namespace AscendC;\n'
        "void f(LocalTensor<bfloat16_t> bf, LocalTensor<half> h, LocalTensor<int32_t> i) {\n"
        f"    {body}\n}}\n"
    )
    with pytest.raises(cpu.KernelBuildError, match=needle):
        cpu.compile_twin(src, tmp_path / "bad.so")
