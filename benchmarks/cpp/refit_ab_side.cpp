// One side of benchmarks/refit_ab.py: the build's TunedKnobs against one copy of the engine's headers. The
// file is compiled twice, with -Dbce_grad=bce_grad_a -DSIDE=A and with bce_grad_b / B, each against its own
// include directory (two revisions of tiling_model/include), and both linked into one process, so the two
// re-fits are timed call by call, interleaved, on the same machine state. Cases as tuned_tiling_bench.cpp
// draws them (tuned_cases.h).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include "bce_grad_tuned_tiling.h"
#include "tuned_cases.h"

#define SIDE_CAT2(a, b) a##_##b
#define SIDE_CAT(a, b) SIDE_CAT2(a, b)
#define SIDE_FN(name) SIDE_CAT(SIDE, name)

namespace {

std::vector<bench::Case> g_cases;
volatile int64_t g_sink = 0;

}  // namespace

extern "C" void SIDE_FN(Setup)(int cases) {
    g_cases = bench::TunedCases(cases);
}

// The least of `reps` timings of one first call at case i (TunedKnobs: lookup and re-fit, no knob cache), ns.
extern "C" double SIDE_FN(Time)(int i, int reps) {
    const bench::Case& c = g_cases[static_cast<size_t>(i)];
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
    const bench::Case& c = g_cases[static_cast<size_t>(i)];
    bce_grad::cost::RefitStats st;
    bool refitted = false;
    const bce_grad::Knobs k = bce_grad::TunedKnobs(c.soc, c.n, c.v, c.p, &refitted, &st);
    knobs[0] = k.blockBytes;
    knobs[1] = k.bufferNum;
    knobs[2] = k.tileBytes;
    knobs[3] = k.coreNum;
    *ranges = st.ranges;
}
