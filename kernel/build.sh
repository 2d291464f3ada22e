#!/usr/bin/env bash
# Build the kernel with CANN, in both of CANN's flows, from the same sources:
#   (1) the custom-op package of BceGrad and BceWithLogitsFused (msopgen project -> custom_opp_*.run) for every SoC family asked
#       for (Ascend910B1..B4 -> ascend910b, Ascend310B1 -> ascend310b; msopgen alone configures one),
#   (2) the kernel-launch library + torch_npu extension that kernel/npu.py and the tuner load (one SoC:
#       the device's).
# Needs ASCEND_HOME_PATH (source <CANN>/set_env.sh); for (2) also torch and torch_npu for $PYTHON.
#   kernel/build.sh [--soc Ascend910B2[,Ascend310B1...]] [--op-package] [--launch-lib]   (default: both)
# Not run on machines without CANN (bcetune's CI has none): there the sources are compile-checked
# against the real CANN 8.5.0 headers (tests/kernel/test_cann_compile.py) and run in the CPU twin.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
socs="Ascend910B2"
want_pkg=0; want_lib=0
while [ $# -gt 0 ]; do
    case "$1" in
        --soc) socs="${2:?--soc needs a SoC name}"; shift 2 ;;
        --op-package) want_pkg=1; shift ;;
        --launch-lib) want_lib=1; shift ;;
        *) echo "build.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
if [ $want_pkg -eq 0 ] && [ $want_lib -eq 0 ]; then want_pkg=1; want_lib=1; fi
if [ -z "${ASCEND_HOME_PATH:-}" ]; then
    echo "build.sh: ASCEND_HOME_PATH is not set: install CANN and source its set_env.sh first" >&2
    exit 2
fi
IFS=',' read -r -a soc_list <<< "$socs"
units=()
for soc in "${soc_list[@]}"; do
    case "$soc" in
        Ascend910B1|Ascend910B2|Ascend910B3|Ascend910B4) unit=ascend910b ;;
        Ascend310B1) unit=ascend310b ;;
        *) echo "build.sh: unknown SoC $soc (Ascend910B1..B4, Ascend310B1)" >&2; exit 2 ;;
    esac
    [[ " ${units[*]} " == *" $unit "* ]] || units+=("$unit")
done
PYTHON="${PYTHON:-python3}"
out="$here/build"
mkdir -p "$out"

if [ $want_pkg -eq 1 ]; then
    command -v msopgen >/dev/null || { echo "build.sh: msopgen not found (CANN toolkit bin)" >&2; exit 2; }
    proj="$out/BceGrad"
    rm -rf "$proj"
    msopgen gen -i "$here/op_host/bce_grad.json" -c "ai_core-${soc_list[0]}" -lan cpp -out "$proj"
    # msopgen configures the one SoC given with -c: list every family asked for
    "$PYTHON" - "$proj/CMakePresets.json" "$(IFS=';'; echo "${units[*]}")" <<'PY'
import json, sys
path, units = sys.argv[1], sys.argv[2]
doc = json.load(open(path))
for preset in doc.get("configurePresets", []):
    cache = preset.get("cacheVariables", {})
    if "ASCEND_COMPUTE_UNIT" in cache:
        cache["ASCEND_COMPUTE_UNIT"]["value"] = units
json.dump(doc, open(path, "w"), indent=4)
PY
    # op_host in the ops-nn layout: msopgen's one-file bce_grad.cpp gives way to our def / tiling /
    # infershape files (its CMake globs op_host/*.cpp) and the pure C++ headers they share with the tests
    rm -f "$proj"/op_host/*.cpp
    cp "$here"/op_host/*.cpp "$here"/op_host/*.h "$proj/op_host/"
    # the host tiling arithmetic, the tiling struct and the cost model's engine live below kernel/
    # (tiling_model/include, shared with the Python binding): beside the TilingFunc, and the struct beside the kernel
    cp "$here"/../tiling_model/include/*.h "$proj/op_host/"
    # the re-fit must round as the service's cost model does: no FMA contraction (aarch64 hosts have FMA)
    sed -i '1i add_compile_options(-ffp-contract=off)' "$proj/op_host/CMakeLists.txt"
    # both ops' kernel entries (msopgen names them after the ops: bce_grad.cpp, bce_with_logits_fused.cpp)
    cp "$here"/op_kernel/bce_grad.cpp "$here"/op_kernel/bce_with_logits_fused.cpp "$here"/op_kernel/bce_grad.h \
        "$here"/../tiling_model/include/bce_grad_tiling_data.h "$proj/op_kernel/"
    # the custom-op flow of the kernel source: registered tiling struct, framework workspace first
    sed -i '1i add_ops_compile_options(ALL OPTIONS -DBCE_GRAD_CUSTOM_OP=1)' "$proj/op_kernel/CMakeLists.txt"
    (cd "$proj" && bash build.sh)
    echo "op package (${units[*]}): $(ls "$proj"/build_out/custom_opp_*.run)"
fi

if [ $want_lib -eq 1 ]; then
    [ ${#soc_list[@]} -eq 1 ] || { echo "build.sh: the launch library is built for one SoC (the device's)" >&2; exit 2; }
    cmake -S "$here" -B "$out/launch" -DSOC_VERSION="${soc_list[0]}" -DASCEND_CANN_PACKAGE_PATH="$ASCEND_HOME_PATH" \
        -DPython3_EXECUTABLE="$(command -v "$PYTHON")"
    cmake --build "$out/launch" -j
    echo "torch_npu extension: $(ls "$out"/launch/bce_grad_npu*.so)"
    echo "use it: BCETUNE_NPU_EXT=$(ls "$out"/launch/bce_grad_npu*.so) python -m tuner sweep --backend npu ..."
fi
