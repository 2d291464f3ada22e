// Test driver: one tiling per input line, printed as numbers, so tests compare it with tiling_model.
// Input:  n dtype reduction weight_form pos_weight wrt classes weight_period block_bytes buffer_num tile_bytes core_num
//         ub_bytes ub_reserve aiv_cores scheme(0 seed, 1 exact)      (knobs: 0 = default)
// Output: "ok" then the 17 struct fields, block_dim, tiling_key and the 4 resolved knobs; or "err".
#include <cstdio>

#include "bce_grad_tiling_core.h"

int main() {
    long long n, dtype, red, weight, pw, wrt, classes, period, block, bn, tile, cores, ub, reserve, aiv, scheme;
    while (std::scanf("%lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld", &n, &dtype,
                      &red, &weight, &pw, &wrt, &classes, &period, &block, &bn, &tile, &cores, &ub, &reserve, &aiv,
                      &scheme) == 16) {
        bce_grad::Variant v;
        v.dtype = static_cast<bce_grad::Dtype>(dtype);
        v.reduction = static_cast<bce_grad::Reduction>(red);
        v.weight = static_cast<bce_grad::Form>(weight);
        v.weightPeriod = period;
        v.posWeight = static_cast<bce_grad::PosWeight>(pw);
        v.wrt = static_cast<bce_grad::Wrt>(wrt);
        v.classes = classes;
        bce_grad::Knobs k;
        k.blockBytes = block;
        k.bufferNum = bn;
        k.tileBytes = tile;
        k.coreNum = cores;
        bce_grad::Platform p{ub, reserve, aiv};
        bce_grad::TilingResult r;
        const char* err = nullptr;
        auto s = bce_grad::ComputeTiling(n, v, k, p, scheme ? bce_grad::Scheme::Exact : bce_grad::Scheme::Seed, &r, &err);
        if (s != bce_grad::Status::Ok) {
            std::printf("err\n");
            continue;
        }
        const int64_t* f = reinterpret_cast<const int64_t*>(&r.data);
        std::printf("ok");
        for (size_t i = 0; i < sizeof(r.data) / sizeof(int64_t); ++i) std::printf(" %lld", (long long)f[i]);
        std::printf(" %lld %lld %lld %lld %lld %lld %lld\n", (long long)r.blockDim, (long long)r.tilingKey,
                    (long long)r.knobs.blockBytes, (long long)r.knobs.bufferNum, (long long)r.knobs.tileBytes,
                    (long long)r.knobs.coreNum, (long long)bce_grad::WorkspaceBytes(v, r));
    }
    return 0;
}
