/**
 * Kernel entry of the fused BCEWithLogits loss and gradient (AIV only), the sibling of bce_grad.cpp: the same
 * kernel class (bce_grad.h, its fused mode), tiling struct and host tiling (the variant key's mode digit is 1).
 * Inputs: the logits x, the target y, the optional weight and pos_weight (nullptr when absent: never read);
 * outputs: dx, and the loss (reduction none: the input's shape and dtype) or, for sum and mean, one float per
 * core (blockDim of them: that core's sum of the loss, added by the host in order); then the workspace (the
 * last-dim rows) and the tiling struct in GM.
 *
 * Both CANN build flows, as bce_grad.cpp: the kernel-launch flow reads the struct from GM (LoadTiling), the
 * custom-op flow (-DBCE_GRAD_CUSTOM_OP) through GET_TILING_DATA_WITH_STRUCT. Float dtypes only.
 */
#include "bce_grad.h"
#include "bce_grad_tiling_data.h"
#include "kernel_operator.h"

extern "C" __global__ __aicore__ void bce_with_logits_fused(GM_ADDR logits, GM_ADDR labels, GM_ADDR weight,
                                                            GM_ADDR posWeight, GM_ADDR dx, GM_ADDR loss,
                                                            GM_ADDR workspace, GM_ADDR tiling) {
#if !(defined(__NPU_ARCH__) && __NPU_ARCH__ == 3002)
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
#endif
#if defined(BCE_GRAD_CUSTOM_OP)
    REGISTER_TILING_DEFAULT(BceGradTilingData);
    GET_TILING_DATA_WITH_STRUCT(BceGradTilingData, t, tiling);
    workspace = AscendC::GetUserWorkspace(workspace);
#else
    BceGradTilingData t;
    bce_grad_kernel::LoadTiling(&t, tiling);
#endif
#if defined(DTYPE_LOGITS)
    bce_grad_kernel::Run<DTYPE_LOGITS>(nullptr, logits, labels, weight, posWeight, dx, loss, workspace, t);
#else
    switch (bce_grad_kernel::DecodeKey(t.tilingKey).dtype) {
        case 0:
            bce_grad_kernel::Run<float>(nullptr, logits, labels, weight, posWeight, dx, loss, workspace, t);
            break;
        case 1:
            bce_grad_kernel::Run<half>(nullptr, logits, labels, weight, posWeight, dx, loss, workspace, t);
            break;
        case 2:
            bce_grad_kernel::Run<bfloat16_t>(nullptr, logits, labels, weight, posWeight, dx, loss, workspace, t);
            break;
        default:
            break;
    }
#endif
}
