// What the CANN build does for a call, one call per input line (kernel/host_tiling.py builds and runs
// this; the parity test and `make bench-regret` compare it with the service).
// Input:  soc dtype reduction weight_form pos_weight wrt mode n weight_period ub_bytes ub_reserve aiv_cores
// Output: "hit <tuned size>" or "miss", the knobs the build uses ("block bn tile cores"; 0 = the
//         scheme's default), "refit" or "table", then TunedTiling's 17 struct fields and block_dim
//         ("err" if the tiling is refused). TunedKnobs is called directly, TunedTiling through the
//         process's knob cache: equal fields say the cache returns what it stored.
#include <cstdio>

#include "bce_grad_tuned_tiling.h"

int main() {
    char soc[64];
    long long dtype, red, weight, pw, wrt, mode, n, period, ub, reserve, aiv;
    while (std::scanf("%63s %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld", soc, &dtype, &red, &weight, &pw,
                      &wrt, &mode, &n, &period, &ub, &reserve, &aiv) == 12) {
        bce_grad::Variant v;
        v.dtype = static_cast<bce_grad::Dtype>(dtype);
        v.reduction = static_cast<bce_grad::Reduction>(red);
        v.weight = static_cast<bce_grad::Form>(weight);
        v.weightPeriod = period;
        v.posWeight = static_cast<bce_grad::PosWeight>(pw);
        v.wrt = static_cast<bce_grad::Wrt>(wrt);
        v.mode = static_cast<bce_grad::Mode>(mode);
        v.classes = v.posWeight == bce_grad::PosWeight::LastDim ? n : 0;  // shape [n]: the last dim is n
        const bce_grad::tuned::Entry* e = bce_grad::LookupTuned(soc, v, n);
        if (e) {
            std::printf("hit %lld", (long long)e->size);
        } else {
            std::printf("miss");
        }
        bce_grad::Platform p{ub, reserve, aiv};
        bool refitted = false;
        const bce_grad::Knobs k = bce_grad::TunedKnobs(soc, n, v, p, &refitted);
        std::printf(" %lld %lld %lld %lld %s", (long long)k.blockBytes, (long long)k.bufferNum, (long long)k.tileBytes,
                    (long long)k.coreNum, refitted ? "refit" : "table");
        bce_grad::TilingResult r;
        const char* err = nullptr;
        if (bce_grad::TunedTiling(soc, n, v, p, &r, &err) != bce_grad::Status::Ok) {
            std::printf(" err\n");
            continue;
        }
        const int64_t* f = reinterpret_cast<const int64_t*>(&r.data);
        for (size_t i = 0; i < sizeof(r.data) / sizeof(int64_t); ++i) std::printf(" %lld", (long long)f[i]);
        std::printf(" %lld\n", (long long)r.blockDim);
    }
    return 0;
}
