// One side of benchmarks/refit_ab.py: the build's TunedKnobs against one copy of the engine's headers. The
// file is compiled twice, with -Dbce_grad=bce_grad_a -DSIDE=A and with bce_grad_b / B, each against its own
// include directory (two revisions of tiling_model/include), and both linked into one process, so the two
// re-fits are timed call by call, interleaved, on the same machine state. Cases as tuned_tiling_bench.cpp
// draws them (the same seed): random tuned keys, a quarter at a tuned size, the rest log-uniform.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "bce_grad_tuned_tiling.h"

#define SIDE_CAT2(a, b) a##_##b
#define SIDE_CAT(a, b) SIDE_CAT2(a, b)
#define SIDE_FN(name) SIDE_CAT(SIDE, name)

namespace {

struct Case {
    const char* soc;
    bce_grad::Variant v;
    int64_t n;
    bce_grad::Platform p;
};

std::vector<Case> g_cases;
volatile int64_t g_sink = 0;

}  // namespace

extern "C" void SIDE_FN(Setup)(int cases) {
    std::mt19937_64 rng(20261130);
    const size_t nRanges = std::size(bce_grad::tuned::kVariants);
    g_cases.clear();
    for (int i = 0; i < cases; ++i) {
        const bce_grad::tuned::VariantRange* pick = &bce_grad::tuned::kVariants[rng() % nRanges];
        while (pick->seeded) pick = &bce_grad::tuned::kVariants[rng() % nRanges];
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
        c.p = bce_grad::Platform{s.ubBytes, s.ubReserveBytes, s.aivCores};
        g_cases.push_back(c);
    }
}

// The least of `reps` timings of one first call at case i (TunedKnobs: lookup and re-fit, no knob cache), ns.
extern "C" double SIDE_FN(Time)(int i, int reps) {
    const Case& c = g_cases[static_cast<size_t>(i)];
    double least = 1e300;
    for (int r = 0; r < reps; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        const bce_grad::Knobs k = bce_grad::TunedKnobs(c.soc, c.n, c.v, c.p);
        const auto t1 = std::chrono::steady_clock::now();
        g_sink = g_sink + k.tileBytes;
        least = std::min(least, std::chrono::duration<double, std::nano>(t1 - t0).count());
    }
    return least;
}

// Case i's knobs and the re-fit's ranges (what the two sides must agree on, and what they did).
extern "C" void SIDE_FN(Pick)(int i, int64_t* knobs, int64_t* ranges) {
    const Case& c = g_cases[static_cast<size_t>(i)];
    bce_grad::cost::RefitStats st;
    bool refitted = false;
    const bce_grad::Knobs k = bce_grad::TunedKnobs(c.soc, c.n, c.v, c.p, &refitted, &st);
    knobs[0] = k.blockBytes;
    knobs[1] = k.bufferNum;
    knobs[2] = k.tileBytes;
    knobs[3] = k.coreNum;
    *ranges = st.ranges;
}
