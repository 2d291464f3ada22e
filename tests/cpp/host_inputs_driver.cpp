// Test driver for what the CANN TilingFunc reads from the platform and the call, through the core:
//   "ub FAMILY REPORTED"  -> usable UB bytes (PlatformFromReported: ubBytes - ubReserveBytes)
//   "pw PRESENT SAME PWDIMS PWELEMS INDIMS LASTDIM" -> "ok FORM CLASSES" or "err"
#include <cstdio>
#include <cstring>

#include "bce_grad_tiling_core.h"

int main() {
    char cmd[8];
    while (std::scanf("%7s", cmd) == 1) {
        if (std::strcmp(cmd, "ub") == 0) {
            long long family, reported;
            if (std::scanf("%lld %lld", &family, &reported) != 2) return 2;
            bce_grad::Platform p = bce_grad::PlatformFromReported(static_cast<bce_grad::SocFamily>(family), reported, 1);
            std::printf("%lld\n", (long long)(p.ubBytes - p.ubReserveBytes));
        } else {
            long long present, same, pwDims, pwElems, inDims, last;
            if (std::scanf("%lld %lld %lld %lld %lld %lld", &present, &same, &pwDims, &pwElems, &inDims, &last) != 6) return 2;
            bce_grad::Variant v;
            const char* err = nullptr;
            if (bce_grad::PosWeightFromShape(present, same, pwDims, pwElems, inDims, last, &v, &err) != bce_grad::Status::Ok) {
                std::printf("err\n");
            } else {
                std::printf("ok %lld %lld\n", (long long)v.posWeight, (long long)v.classes);
            }
        }
    }
    return 0;
}
