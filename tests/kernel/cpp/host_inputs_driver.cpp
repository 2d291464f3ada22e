// Test driver for what the CANN TilingFunc reads from the platform and the call, through the core:
//   "ub FAMILY REPORTED"  -> usable UB bytes (PlatformFromReported: ubBytes - ubReserveBytes)
//   "w PRESENT WRANK W0 .. INRANK IN0 .."  -> "ok FORM PERIOD" or "err" (WeightFromShape)
//   "pw PRESENT PWRANK P0 .. INRANK IN0 .." -> "ok FORM CLASSES" or "err" (PosWeightFromShape)
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
            const bool isWeight = std::strcmp(cmd, "w") == 0;
            long long present, wRank, inRank;
            int64_t wDims[32] = {}, inDims[32] = {};
            if (std::scanf("%lld %lld", &present, &wRank) != 2 || wRank > 32) return 2;
            for (long long i = 0; i < wRank; ++i) {
                long long d;
                if (std::scanf("%lld", &d) != 1) return 2;
                wDims[i] = d;
            }
            if (std::scanf("%lld", &inRank) != 1 || inRank > 32) return 2;
            for (long long i = 0; i < inRank; ++i) {
                long long d;
                if (std::scanf("%lld", &d) != 1) return 2;
                inDims[i] = d;
            }
            bce_grad::Variant v;
            const char* err = nullptr;
            const bce_grad::Status s =
                isWeight ? bce_grad::WeightFromShape(present, wDims, wRank, inDims, inRank, &v, &err)
                         : bce_grad::PosWeightFromShape(present, wDims, wRank, inDims, inRank, &v, &err);
            if (s != bce_grad::Status::Ok) {
                std::printf("err\n");
            } else if (isWeight) {
                std::printf("ok %lld %lld\n", (long long)v.weight, (long long)v.weightPeriod);
            } else {
                std::printf("ok %lld %lld\n", (long long)v.posWeight, (long long)v.classes);
            }
        }
    }
    return 0;
}
