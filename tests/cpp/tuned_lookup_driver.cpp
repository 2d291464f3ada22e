// Test driver: C++ table lookup + tiling per input line, to compare with the Python lookup.
// Input:  soc dtype reduction weight pos_weight wrt n ub_bytes ub_reserve aiv_cores
// Output: "hit size block bn tile cores" or "miss", then the 15 struct fields and block_dim.
#include <cstdio>

#include "bce_grad_tuned_table.h"

int main() {
    char soc[64];
    long long dtype, red, weight, pw, wrt, n, ub, reserve, aiv;
    while (std::scanf("%63s %lld %lld %lld %lld %lld %lld %lld %lld %lld", soc, &dtype, &red, &weight, &pw, &wrt, &n,
                      &ub, &reserve, &aiv) == 10) {
        bce_grad::Variant v;
        v.dtype = static_cast<bce_grad::Dtype>(dtype);
        v.reduction = static_cast<bce_grad::Reduction>(red);
        v.weight = weight != 0;
        v.posWeight = static_cast<bce_grad::PosWeight>(pw);
        v.wrt = static_cast<bce_grad::Wrt>(wrt);
        v.classes = v.posWeight == bce_grad::PosWeight::LastDim ? n : 0;  // shape [n]: the last dim is n
        const bce_grad::TunedEntry* e = bce_grad::LookupTuned(soc, v, n);
        if (e) {
            std::printf("hit %lld %lld %lld %lld %lld", (long long)e->size, (long long)e->blockBytes,
                        (long long)e->bufferNum, (long long)e->tileBytes, (long long)e->coreNum);
        } else {
            std::printf("miss");
        }
        bce_grad::TilingResult r;
        const char* err = nullptr;
        bce_grad::Platform p{ub, reserve, aiv};
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
