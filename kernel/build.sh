#!/usr/bin/env bash
# Build the kernel with CANN: (1) the BceGrad custom-op package (msopgen project, custom_opp_*.run)
# and (2) the kernel-launch library + torch_npu extension that kernel/npu.py loads.
# Needs ASCEND_HOME_PATH (source <CANN>/set_env.sh); for (2) also torch and torch_npu.
#   kernel/build.sh [--soc Ascend910B2] [--op-package] [--launch-lib]   (default: both)
# Not run on machines without CANN (bcetune's CI has none); the CPU twin covers the kernel there.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
soc="Ascend910B2"
want_pkg=0; want_lib=0
while [ $# -gt 0 ]; do
    case "$1" in
        --soc) soc="$2"; shift 2 ;;
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
out="$here/build"
mkdir -p "$out"

if [ $want_pkg -eq 1 ]; then
    command -v msopgen >/dev/null || { echo "build.sh: msopgen not found (CANN toolkit bin)" >&2; exit 2; }
    proj="$out/BceGrad"
    rm -rf "$proj"
    msopgen gen -i "$here/op_host/bce_grad.json" -c "ai_core-$soc" -lan cpp -out "$proj"
    cp "$here"/op_host/bce_grad.cpp "$here"/op_host/bce_grad_tiling_core.h "$here"/op_host/bce_grad_tuned_table.h "$proj/op_host/"
    cp "$here"/op_kernel/bce_grad.cpp "$here"/op_kernel/bce_grad.h "$here"/op_kernel/bce_grad_tiling_data.h "$proj/op_kernel/"
    # (op_host/bce_grad_tiling_core.h includes ../op_kernel/bce_grad_tiling_data.h: same layout there)
    # the custom-op kernel takes the framework workspace and a fixed dtype per binary
    sed -i "1i #define BCE_GRAD_CUSTOM_OP 1" "$proj/op_kernel/bce_grad.cpp"
    (cd "$proj" && bash build.sh)
    echo "op package: $(ls "$proj"/build_out/custom_opp_*.run)"
fi

if [ $want_lib -eq 1 ]; then
    cmake -S "$here" -B "$out/launch" -DSOC_VERSION="$soc" -DASCEND_CANN_PACKAGE_PATH="$ASCEND_HOME_PATH"
    cmake --build "$out/launch" -j
    echo "torch_npu extension: $(ls "$out"/launch/bce_grad_npu*.so)"
    echo "use it: BCETUNE_NPU_EXT=$(ls "$out"/launch/bce_grad_npu*.so) python -m tuner sweep --backend npu ..."
fi
