// The re-fit's range floors (bce_grad::cost::CoreLines::RangeUs and TradeUs) against the simulated pipeline
// (PipelineUs of StageOf's stages, what Evaluate times a core kind with) at every tile size of their range:
// random kernels and SoCs of the generated table, core counts, BUFFER_NUMs, widths, alignments and ranges
// (half of them every tile from the smallest up, as a core count's range is). A floor above a tile's time
// would let the search drop what could win: one line per such tile and a summary; exits 1 on any.
// Usage: refit_floors <cases> <seed>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "bce_grad_tuned_tiling.h"

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: refit_floors <cases> <seed>\n");
        return 2;
    }
    namespace cost = bce_grad::cost;
    const long cases = std::atol(argv[1]);
    std::mt19937_64 rng(std::strtoull(argv[2], nullptr, 10));
    const int kernels = static_cast<int>(std::size(bce_grad::tuned::kKernels));
    const int socs = static_cast<int>(std::size(bce_grad::tuned::kSocs));
    long tiles = 0, over = 0;
    for (long i = 0; i < cases; ++i) {
        const cost::KernelModel& k = bce_grad::tuned::kKernels[rng() % kernels];
        const cost::SocModel& s = bce_grad::tuned::kSocs[rng() % socs];
        const int64_t cores = 1 + static_cast<int64_t>(rng() % 48), bn = 1 + static_cast<int64_t>(rng() % 4);
        const double agg = cost::Aggregate(s, 0.0);
        const cost::CoreLines lines(cores, bn, k, s, agg, cost::VectorFloor(k, s), cost::CurveLine(s.mte2),
                                    cost::CurveLine(s.mte3));
        const cost::CoreShare share = cost::ShareOf(cores, k, s, agg);
        const int64_t step = cost::kTileStepBytes / k.elemBytes;
        const int64_t e = 1 + static_cast<int64_t>(rng() % 400000);
        const bool whole = rng() % 2 == 0, aligned = rng() % 2 == 0;
        const int64_t lo = whole ? step : step * (1 + static_cast<int64_t>(rng() % 100));
        const int64_t hi = whole ? step * (1 + static_cast<int64_t>(rng() % 400)) : lo + step * static_cast<int64_t>(rng() % 200);
        const cost::Lines which = aligned ? cost::Lines::Aligned : cost::Lines::Misaligned;
        const double range = lines.RangeUs(e, which, lo, hi, true), trade = lines.TradeUs(e, e, which, lo, hi);
        for (int64_t x = lo; x <= hi; x += whole ? step : 1 + (hi - lo) / 200) {
            const int64_t t = bce_grad::CeilDiv(e, x);
            const cost::Stage full =
                cost::StageOf(static_cast<double>(std::min(x, e)), k, s, share.share, aligned, -1.0, share.l2Share);
            const cost::Stage last =
                cost::StageOf(static_cast<double>(e - (t - 1) * x), k, s, share.share, aligned, -1.0, share.l2Share);
            const double core = t == 1 ? last.in + last.vec + last.out : cost::PipelineUs(t, full, last, bn);
            ++tiles;
            const double floor = std::max(range, trade);
            if (floor > core * (1.0 + 1e-12) + 1e-9) {
                ++over;
                std::printf("case %ld: %d cores, bn %d, e %lld, tile %lld of %lld..%lld: RangeUs %.9g TradeUs %.9g > %.9g\n",
                            i, static_cast<int>(cores), static_cast<int>(bn), static_cast<long long>(e),
                            static_cast<long long>(x), static_cast<long long>(lo), static_cast<long long>(hi), range,
                            trade, core);
            }
        }
    }
    std::printf("%ld cases, %ld tiles, %ld above the pipeline\n", cases, tiles, over);
    return over == 0 ? 0 : 1;
}
