// Microbenchmark of what the BceGrad TilingFunc runs per call: bce_grad::TunedTiling (lookup, re-fit at
// an unseen size, tiling). Cases: random tuned (SoC, variant) keys of the generated table, a quarter at
// a tuned size, the rest at log-uniform sizes from 1 to 4x the largest tuned size (fixed seed). Each
// case is timed on its own (steady_clock around `repeats` calls), so the output is a distribution over
// calls, not a mean that hides the slow ones:
//   first call at a size   TunedKnobs + ComputeTiling, the knob cache bypassed: what a new shape costs
//   repeated size          TunedTiling once more (the process's knob cache hit): a training loop's steps
// Run: make bench-tiling-cpp (g++ -O2 -ffp-contract=off), or tuned_tiling_bench [cases] [repeats].
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "bce_grad_tuned_tiling.h"
#include "tuned_cases.h"

namespace {

using bench::Case;

volatile int64_t g_sink = 0;  // keeps the calls from being optimised away

double Percentile(std::vector<double> xs, double q) {
    if (xs.empty()) return 0.0;
    std::sort(xs.begin(), xs.end());
    return xs[static_cast<size_t>(q * static_cast<double>(xs.size() - 1))];
}

void Report(const char* what, const std::vector<double>& ns) {
    std::printf("%-40s %6zu calls  median %8.0f ns  p90 %8.0f ns  p99 %8.0f ns  max %8.0f ns\n", what, ns.size(),
                Percentile(ns, 0.5), Percentile(ns, 0.9), Percentile(ns, 0.99), Percentile(ns, 1.0));
}

template <typename F>
double NsPerCall(int repeats, F&& call) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int k = 0; k < repeats; ++k) call();
    const auto t1 = std::chrono::steady_clock::now();
    return std::chrono::duration<double, std::nano>(t1 - t0).count() / repeats;
}

}  // namespace

int main(int argc, char** argv) {
    const int cases = argc > 1 ? std::atoi(argv[1]) : 5000;
    const int repeats = argc > 2 ? std::atoi(argv[2]) : 20;
    if (cases < 1 || repeats < 1) {
        std::fprintf(stderr, "usage: tuned_tiling_bench [cases >= 1] [repeats >= 1]\n");
        return 2;
    }
    const std::vector<Case> all = bench::TunedCases(cases);
    std::vector<double> tunedFirst, refitFirst, repeated;
    bce_grad::TilingResult out;
    const char* err = nullptr;
    for (const Case& c : all) {
        bool refitted = false;
        bce_grad::TunedKnobs(c.soc, c.n, c.v, c.p, &refitted);
        const double first = NsPerCall(repeats, [&] {
            const bce_grad::Knobs k = bce_grad::TunedKnobs(c.soc, c.n, c.v, c.p);
            if (bce_grad::ComputeTiling(c.n, c.v, k, c.p, bce_grad::Scheme::Exact, &out, &err) == bce_grad::Status::Ok) {
                g_sink = g_sink + out.blockDim;
            }
        });
        (refitted ? refitFirst : tunedFirst).push_back(first);
        bce_grad::TunedTiling(c.soc, c.n, c.v, c.p, &out, &err);  // into the knob cache
        repeated.push_back(NsPerCall(repeats, [&] {
            if (bce_grad::TunedTiling(c.soc, c.n, c.v, c.p, &out, &err) == bce_grad::Status::Ok) g_sink = g_sink + out.blockDim;
        }));
    }
    std::vector<double> first(tunedFirst);
    first.insert(first.end(), refitFirst.begin(), refitFirst.end());
    Report("first call at a size, every call", first);
    Report("  at a tuned size (lookup + tiling)", tunedFirst);
    Report("  elsewhere (lookup + re-fit + tiling)", refitFirst);
    Report("repeated size (knob cache + tiling)", repeated);
    return 0;
}
