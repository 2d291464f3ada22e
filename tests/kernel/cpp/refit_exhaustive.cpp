// The re-fit (bce_grad::cost::Refit, a branch and bound) against every configuration of its slice predicted
// one by one (PredictConfig) with the space's tie-break: random sizes, kernel variants of the generated
// table (a quarter of them with the seed kernel's per-tile scalar queue), block subsets, buffer counts, core
// caps, tile tops, seeds (valid or not), knob corrections and residuals (bce_grad_residual.h: wide, or a device's
// few tenths of a per cent, where a floor 3% too high at a core count's widths turns 6 of 250 cases red); and the
// same search with a queue of 4 ranges, where the full queue's fallback does most of the work; and WidestOf
// (what the search bounds each pair by) against KindsOf for every block and core count of each case; and, for a
// quarter of the cases, the re-fit across buffer counts (RefitAcross) against every slice's exhaustive pick.
// Prints one line per disagreement and a summary; exits 1 on any.
// Usage: refit_exhaustive <cases> <seed>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "bce_grad_tuned_tiling.h"

namespace {

using bce_grad::cost::PredictConfig;
using bce_grad::cost::RefitChoice;
using bce_grad::cost::TieKey;

struct Pick {
    int64_t block = -1, tile = -1, cores = -1;
    double key = INFINITY, us = INFINITY;
};

// Every configuration, in the space's tie-break order (larger tile, more cores, larger block first): the first
// of the least rounded prediction, and the least prediction.
Pick Exhaustive(int64_t n, const std::vector<int64_t>& blocks, int64_t bn, int64_t tiles, int64_t maxCores,
                const bce_grad::cost::KernelModel& k, const bce_grad::cost::SocModel& s) {
    Pick best;
    const double hit = bce_grad::cost::DefaultHit(k, s, n);
    for (int64_t ti = tiles; ti >= 1; --ti) {
        for (int64_t c = std::min<int64_t>(maxCores, bce_grad::cost::kMaxCores); c >= 1; --c) {
            for (int64_t b : blocks) {
                if (c > std::max<int64_t>(bce_grad::CeilDiv(n * k.elemBytes, b), 1)) continue;
                const double us = PredictConfig(n, b, bn, ti * bce_grad::cost::kTileStepBytes, c, k, s, hit, true).us;
                best.us = std::min(best.us, us);
                if (TieKey(us) < best.key) best = Pick{b, ti * bce_grad::cost::kTileStepBytes, c, TieKey(us), best.us};
            }
        }
    }
    return best;
}

// KindsOf's widest kind with cores, whether every kind's copies start aligned and which kinds run, as the
// re-fit reads them (WidestOf must agree: its bounds rest on it).
bool SameWidest(int64_t n, int64_t elem, int64_t block, int64_t cores) {
    const bce_grad::cost::Kinds kd = bce_grad::cost::KindsOf(n, elem, block, bce_grad::cost::kTileStepBytes, cores);
    int64_t widest = 0;
    bool aligned = false, allAligned = true;
    for (int i = 0; i < 3; ++i) {
        if (kd.counts[i] > 0 && !kd.aligned[i]) allAligned = false;
        if (kd.counts[i] <= 0 || kd.elems[i] <= 0) continue;
        if (kd.elems[i] > widest) aligned = false;
        widest = std::max(widest, kd.elems[i]);
        if (kd.elems[i] == widest && kd.aligned[i]) aligned = true;
    }
    const bce_grad::cost::WidestKind w = bce_grad::cost::WidestOf(n, elem, block, cores);
    const int64_t structure = (kd.counts[1] > 0 ? 2 : 0) + (kd.counts[2] > 0 ? 1 : 0);
    return w.elems == widest && w.aligned == aligned && w.allAligned == allAligned && w.structure == structure;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: refit_exhaustive <cases> <seed>\n");
        return 2;
    }
    const int cases = std::atoi(argv[1]);
    std::mt19937_64 rng(std::strtoull(argv[2], nullptr, 10));
    const size_t kernels = std::size(bce_grad::tuned::kKernels), socs = std::size(bce_grad::tuned::kSocs);
    int wrong = 0;
    // the residual's bit tricks against their definitions: the last copy's level and the size class
    for (int64_t bytes = 0; bytes <= (int64_t{1} << 16); ++bytes) {
        namespace r = bce_grad::residual;
        const int64_t big = bytes * 3 << 20;  // and multiples far past the grains
        if (r::TailLevel(bytes) != r::AlignLevel(bytes, r::kTailGrains, r::kTailGrainCount) ||
            r::TailLevel(big) != r::AlignLevel(big, r::kTailGrains, r::kTailGrainCount)) {
            ++wrong;
            std::printf("TailLevel(%lld) is not AlignLevel's\n", static_cast<long long>(bytes));
        }
        int64_t log2 = 0;
        for (int64_t v = bytes; v > 1; v >>= 1) ++log2;
        if (r::Log2Floor(bytes) != log2) {
            ++wrong;
            std::printf("Log2Floor(%lld) is not floor(log2)\n", static_cast<long long>(bytes));
        }
    }
    for (int i = 0; i < cases; ++i) {
        bce_grad::cost::SocModel s = bce_grad::tuned::kSocs[rng() % socs];
        bce_grad::cost::KernelModel k = bce_grad::tuned::kKernels[rng() % kernels];
        double blockF[bce_grad::cost::kBlockClasses], bufferF[bce_grad::cost::kBufferClasses];
        double alignF[bce_grad::cost::kAlignClasses], coreF[bce_grad::cost::kCoreClasses];
        const bool corrected = rng() % 3 == 0;  // a device-fitted profile's knob correction
        if (corrected) {
            std::uniform_real_distribution<double> factor(0.8, 1.25);
            for (double& f : blockF) f = factor(rng);
            for (double& f : bufferF) f = factor(rng);
            for (double& f : alignF) f = rng() % 2 ? 1.0 : factor(rng);
            for (double& f : coreF) f = factor(rng);
            s.blockFactor = blockF;
            s.bufferFactor = bufferF;
            s.alignFactor = alignF;
            s.coreFactor = coreF;
            k.corrected = true;
        }
        double residualF[bce_grad::residual::kWidth];
        const bool residual = rng() % 2 == 0;  // a device-fitted profile's residual over the realised tiling
        if (residual) {
            // wide factors, or a device's: 1% or a few tenths of a per cent apart, whole features left at 1 (a fit's
            // dropped groups), where the floors are tight enough to prune a core count's widths by their pairs' factors
            constexpr double kSpreads[] = {0.15, 0.03, 0.01, 0.004};
            const int spread = static_cast<int>(rng() % std::size(kSpreads));
            std::lognormal_distribution<double> factor(0.0, kSpreads[spread]);
            for (double& f : residualF) f = factor(rng);
            for (int f = 0; spread >= 2 && f < bce_grad::residual::kFeatures; ++f) {
                if (rng() % 3 != 0) continue;
                for (int l = 0; l < bce_grad::residual::kLevels[f]; ++l) residualF[bce_grad::residual::OffsetOf(f) + l] = 1.0;
            }
            s.residualFactor = residualF;
            k.corrected = true;
        }
        const double logN = std::uniform_real_distribution<double>(0.0, std::log(4e8))(rng);
        const int64_t n = rng() % 16 == 0 ? 1 + static_cast<int64_t>(rng() % 8) : std::max<int64_t>(1, std::exp(logN));
        if (k.rowInputs > 0) k.rowLen = 1 + static_cast<int64_t>(rng() % 5000);
        // a quarter with the seed kernel's per-tile grad queue (none is exported today: the floors hold anyway)
        if (rng() % 4 == 0) k.scalarQueueBytes = 32;
        std::vector<int64_t> blocks;
        for (int64_t b : bce_grad::tuned::kBlockChoices) {
            if (rng() % 3 != 0) blocks.push_back(b);
        }
        if (blocks.empty()) blocks.push_back(bce_grad::tuned::kBlockChoices[rng() % std::size(bce_grad::tuned::kBlockChoices)]);
        const int64_t bn = 1 + static_cast<int64_t>(rng() % 4);
        const int64_t maxCores = rng() % 4 == 0 ? 1 + static_cast<int64_t>(rng() % s.aivCores) : s.aivCores;
        const int64_t tileTop = bce_grad::cost::kTileStepBytes * (1 + static_cast<int64_t>(rng() % (rng() % 2 ? 60 : 380)));
        const int64_t seedBlock = rng() % 4 == 0 ? 0 : blocks[rng() % blocks.size()];
        const int64_t seedTile = bce_grad::cost::kTileStepBytes * (1 + static_cast<int64_t>(rng() % 64));
        const int64_t seedCores = 1 + static_cast<int64_t>(rng() % 48);
        for (int64_t b : blocks) {
            const int64_t top = std::min<int64_t>(std::max<int64_t>(bce_grad::CeilDiv(n * k.elemBytes, b), 1), 64);
            for (int64_t c = 1; c <= top; ++c) {
                if (!SameWidest(n, k.elemBytes, b, c)) {
                    ++wrong;
                    std::printf("case %d: WidestOf(%lld, %lld, %lld, %lld) is not KindsOf's widest kind\n", i,
                                static_cast<long long>(n), static_cast<long long>(k.elemBytes), static_cast<long long>(b),
                                static_cast<long long>(c));
                }
            }
        }
        const RefitChoice got = bce_grad::cost::Refit(n, blocks.data(), static_cast<int>(blocks.size()), bn, tileTop,
                                                      maxCores, k, s, seedBlock, seedTile, seedCores);
        const Pick want = Exhaustive(n, blocks, bn, tileTop / bce_grad::cost::kTileStepBytes, maxCores, k, s);
        // and with a queue of 4 ranges: the full queue's fallback (every configuration of a range at once)
        static bce_grad::cost::RefitScratch scratch;
        bce_grad::cost::RefitSearch small(scratch, n, blocks.data(), static_cast<int>(blocks.size()), bn,
                                          std::min(tileTop / bce_grad::cost::kTileStepBytes, bce_grad::cost::kMaxTiles),
                                          maxCores, k, s, nullptr, 4);
        small.Seed(seedBlock, seedTile, seedCores);
        const RefitChoice full = small.Run();
        if (full.blockBytes != got.blockBytes || full.tileBytes != got.tileBytes || full.coreNum != got.coreNum ||
            full.us != got.us) {
            ++wrong;
            std::printf("case %d: a queue of 4 picks (%lld, %lld, %lld, %.12g)\n", i, static_cast<long long>(full.blockBytes),
                        static_cast<long long>(full.tileBytes), static_cast<long long>(full.coreNum), full.us);
        }
        // bounded by its own best's prediction (what RefitAcross passes a slice searched after one that tied it):
        // the same pick, found as a tie of the bound (a worse configuration seen first must not hide it)
        const RefitChoice bounded = bce_grad::cost::Refit(n, blocks.data(), static_cast<int>(blocks.size()), bn, tileTop,
                                                          maxCores, k, s, seedBlock, seedTile, seedCores, nullptr, want.us);
        if (bounded.blockBytes != want.block || bounded.tileBytes != want.tile || bounded.coreNum != want.cores) {
            ++wrong;
            std::printf("case %d: bounded by its best's %.12g, the re-fit picks (%lld, %lld, %lld), key %.12g\n", i, want.us,
                        static_cast<long long>(bounded.blockBytes), static_cast<long long>(bounded.tileBytes),
                        static_cast<long long>(bounded.coreNum), bounded.key);
        }
        if (got.blockBytes != want.block || got.tileBytes != want.tile || got.coreNum != want.cores || got.us != want.us) {
            ++wrong;
            std::printf("case %d: %s n=%lld bn=%lld tile_top=%lld max_cores=%lld corrected=%d residual=%d: re-fit (%lld, %lld, %lld, %.12g) "
                        "exhaustive (%lld, %lld, %lld, %.12g)\n",
                        i, s.name, static_cast<long long>(n), static_cast<long long>(bn), static_cast<long long>(tileTop),
                        static_cast<long long>(maxCores), corrected, residual, static_cast<long long>(got.blockBytes),
                        static_cast<long long>(got.tileBytes), static_cast<long long>(got.coreNum), got.us,
                        static_cast<long long>(want.block), static_cast<long long>(want.tile),
                        static_cast<long long>(want.cores), want.us);
        }
        // a quarter: every buffer count at once (RefitAcross, each slice bounded by those before it, in a random
        // order) against each slice's exhaustive pick in the space's order (ConfigBefore)
        if (rng() % 4 != 0) continue;
        bce_grad::cost::RefitSlice slices[4];
        int count = 0;
        for (int64_t b = 1; b <= 4; ++b) {
            if (rng() % 5 == 0) continue;
            slices[count++] = bce_grad::cost::RefitSlice{
                b, bce_grad::cost::kTileStepBytes * static_cast<int64_t>(rng() % (rng() % 2 ? 60 : 380))};  // 0: none fits
        }
        std::shuffle(slices, slices + count, rng);
        const bce_grad::cost::RefitPick across = bce_grad::cost::RefitAcross(
            n, blocks.data(), static_cast<int>(blocks.size()), slices, count, maxCores, k, s, seedBlock, seedTile, seedCores);
        Pick best;
        int64_t bestBn = -1;
        for (int j = 0; j < count; ++j) {
            const Pick p = Exhaustive(n, blocks, slices[j].bufferNum, slices[j].tileTop / bce_grad::cost::kTileStepBytes,
                                      maxCores, k, s);
            if (p.block < 0) continue;
            const bce_grad::cost::ConfigKey key{p.key, slices[j].bufferNum, p.tile, p.cores, p.block};
            if (bestBn < 0 || bce_grad::cost::ConfigBefore(key, {best.key, bestBn, best.tile, best.cores, best.block})) {
                best = p;
                bestBn = slices[j].bufferNum;
            }
        }
        if (across.bufferNum != bestBn || (bestBn > 0 && (across.choice.blockBytes != best.block ||
                                                          across.choice.tileBytes != best.tile ||
                                                          across.choice.coreNum != best.cores))) {
            ++wrong;
            std::printf("case %d: %s n=%lld across %d buffer counts: (%lld, %lld, %lld, %lld), exhaustive (%lld, %lld, %lld, "
                        "%lld)\n",
                        i, s.name, static_cast<long long>(n), count, static_cast<long long>(across.choice.blockBytes),
                        static_cast<long long>(across.bufferNum), static_cast<long long>(across.choice.tileBytes),
                        static_cast<long long>(across.choice.coreNum), static_cast<long long>(best.block),
                        static_cast<long long>(bestBn), static_cast<long long>(best.tile), static_cast<long long>(best.cores));
        }
    }
    std::printf("%d cases, %d disagreements\n", cases, wrong);
    return wrong == 0 ? 0 : 1;
}
