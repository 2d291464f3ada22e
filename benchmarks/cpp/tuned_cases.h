// The calls the TilingFunc benchmarks time (tuned_tiling_bench.cpp, refit_ab_side.cpp): random tuned
// (SoC, variant) keys of the generated table, a quarter at a tuned size, the rest at log-uniform sizes from
// 1 to 4x the largest tuned size, from a fixed seed (every benchmark draws the same calls).
#ifndef BCE_GRAD_BENCH_TUNED_CASES_H
#define BCE_GRAD_BENCH_TUNED_CASES_H

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "bce_grad_tuned_tiling.h"

namespace bench {

struct Case {
    const char* soc;
    bce_grad::Variant v;
    int64_t n;
    bce_grad::Platform p;
};

inline std::vector<Case> TunedCases(int cases) {
    std::mt19937_64 rng(20261130);
    const size_t nRanges = std::size(bce_grad::tuned::kVariants);
    std::vector<Case> all;
    for (int i = 0; i < cases; ++i) {
        const bce_grad::tuned::VariantRange* pick = &bce_grad::tuned::kVariants[rng() % nRanges];
        while (pick->seeded) pick = &bce_grad::tuned::kVariants[rng() % nRanges];  // the tuned variants
        const bce_grad::tuned::VariantRange& r = *pick;
        const bce_grad::cost::SocModel& s = bce_grad::tuned::kSocs[r.soc];
        Case c;
        c.soc = s.name;
        c.v.dtype = static_cast<bce_grad::Dtype>(r.dtype);
        c.v.reduction = static_cast<bce_grad::Reduction>(r.reduction);
        c.v.weight = static_cast<bce_grad::Form>(r.weight);
        c.v.posWeight = static_cast<bce_grad::PosWeight>(r.posWeight);
        c.v.wrt = static_cast<bce_grad::Wrt>(r.wrt);
        if (rng() % 4 == 0) {
            c.n = bce_grad::tuned::kEntries[r.first + static_cast<int64_t>(rng() % static_cast<uint64_t>(r.count))].size;
        } else {
            const double top = static_cast<double>(bce_grad::tuned::kEntries[r.first + r.count - 1].size) * 4.0;
            c.n = std::max<int64_t>(1, static_cast<int64_t>(std::exp(std::uniform_real_distribution<double>(0.0, std::log(top))(rng))));
        }
        c.v.classes = c.v.posWeight == bce_grad::PosWeight::LastDim ? c.n : 0;
        c.p = bce_grad::Platform{s.ubBytes, s.ubReserveBytes, s.aivCores};  // what the SoC's TilingFunc computes
        all.push_back(c);
    }
    return all;
}

}  // namespace bench

#endif  // BCE_GRAD_BENCH_TUNED_CASES_H
