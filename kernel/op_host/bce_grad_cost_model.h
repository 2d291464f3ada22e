/**
 * The cost model's re-fit in C++: for a tuned bucket's BUFFER_NUM, the block size, core count and tile
 * the model finds fastest at the exact element count, cold L2. It is tiling_model/compiled.py
 * (the numba form of tiling_model/simulate.py) line for line, on the same doubles in the same order,
 * so the build picks what the service picks: tests/test_tuned_header.py compares both on
 * thousands of random sizes and variants per SoC.
 *
 * Pure C++17, no CANN headers, no heap allocation (a per-thread scratch). The numbers it reads (the
 * SoC's DMA curves, clocks and bandwidths, the kernel's streams and instructions) are generated into
 * bce_grad_tuned_table.h from the SoC profiles and tiling_model.kernels. Compile without -ffast-math
 * and without FMA contraction (-ffp-contract=off; GCC contracts by default in its GNU dialects where
 * the target has FMA, e.g. aarch64 hosts), or a tie may break differently from the service's.
 */
#ifndef BCE_GRAD_COST_MODEL_H
#define BCE_GRAD_COST_MODEL_H

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace bce_grad {
namespace cost {

// tiling_model/simulate.py and space.py (tests/test_tuned_header.py checks they agree)
constexpr int64_t kWarmup = 24;           // tiles simulated before the steady state is extrapolated
constexpr int64_t kPeriod = 12;           // a multiple of every steady-state cyclicity (BUFFER_NUM <= 4)
constexpr int64_t kRepeatBytes = 256;     // bytes one vector repeat processes
constexpr int64_t kGmAlignBytes = 512;    // copies starting off this alignment stream slower
constexpr int64_t kTileStepBytes = 512;   // tile choices are whole 512-B blocks
constexpr double kBoundSlack = 1e-9;      // the period jump is exact to float rounding
constexpr double kPruneMarginUs = 1e-6;   // the chain bound is the chain's to float rounding
constexpr double kPruneRelative = 1e-12;
constexpr double kTieScale = 1e9;         // predictions equal to 1e-9 us are a tie (TIE_DECIMALS = 9)

/** One DMA direction's measured time per copy size (bytes, us), and its extrapolation. */
struct Curve {
    const double* bytes;
    const double* us;
    int points;
    double slope;  // us per byte past the last point
    double fixed;  // the per-copy cost the curve extrapolates to at 0 bytes
};

/** A SoC as the model reads it (tiling_model/socs/<name>.json). */
struct SocModel {
    const char* name;
    int64_t aivCores;
    int64_t ubBytes;         // what the seed scheme divides (Platform::ubBytes)
    int64_t ubReserveBytes;  // left free below it (Platform::ubReserveBytes)
    double launchUs;
    double coreStartUs;
    double vectorStartCycles;
    double vectorMhz;  // MSKPP cycles retired per us: the clock over the fitted chain factor
    double misalignedFactor;
    double hbmGbps;
    double l2Gbps;
    double hbmPeakGbps;
    double l2PeakGbps;
    double l2HalfBytes;  // the steady-state L2 curve: hit = 1 / (1 + (footprint / half) ^ falloff),
    double l2Falloff;    // at most the share the L2 holds, min(1, l2Bytes / footprint)
    double l2Bytes;
    Curve mte2;
    Curve mte3;
};

struct VectorOp {
    double operandBytes;     // of the widest operand: sets the repeat count
    double cyclesPerRepeat;
};

/** An exact-scheme kernel variant as the model reads it (tiling_model.kernels.bce_grad_kernel). */
struct KernelModel {
    int64_t elemBytes;
    int64_t fullInputs;    // streams read element by element
    int64_t outputs;       // streams written element by element
    int64_t scalarInputs;  // values read once per launch (the grad of sum/mean)
    int64_t rowBytes;      // per-core staging copy of a last-dim row
    const VectorOp* ops;
    int opCount;
    int64_t workspaceInputs;  // of fullInputs: last-dim operands read from the core's workspace (L2)
    int64_t rowInputs;        // of fullInputs: rows operands (a few values per tile, expanded in UB)
    int64_t rowLen;           // R of the rows operand (set per call: WithRowLen)
    int64_t rowExpandBytes;   // bytes per expanded element
    int64_t Streams() const { return fullInputs + outputs; }
    int64_t HbmStreams() const { return Streams() - workspaceInputs - rowInputs; }
};

/** The kernel with a rows operand of R elements per value (a per-call number, like n). */
inline KernelModel WithRowLen(KernelModel k, int64_t rowLen) {
    if (k.rowInputs > 0) k.rowLen = rowLen;
    return k;
}

constexpr double kDupCycles = 1.0;  // Duplicate, cycles per 256-B repeat (kernels.CYCLES_PER_REPEAT)

/** The three kinds of core of an exact tiling (big, small, last): simulate.kinds_exact. */
struct Kinds {
    int64_t counts[3];
    int64_t elems[3];
    int64_t tiles[3];
    int64_t tail[3];
    bool aligned[3];
    int64_t cores;
};

/** Python's -(-a // b) for a >= 0, b > 0. */
inline int64_t Ceil(int64_t a, int64_t b) { return (a + b - 1) / b; }

inline Kinds KindsOf(int64_t n, int64_t elem, int64_t block, int64_t tile, int64_t coreNum) {
    Kinds k{};
    const int64_t blockElems = block / elem;
    const int64_t te = tile / elem;
    const int64_t blocks = Ceil(n, blockElems);
    int64_t cores = std::max<int64_t>(std::min(coreNum, blocks), 1);
    const int64_t every = blocks / cores;
    const int64_t tailBlocks = blocks - every * cores;
    const int64_t small = every * blockElems;
    const int64_t big = small + blockElems;
    const int64_t last = n - (big * tailBlocks + small * (cores - 1 - tailBlocks));
    if (n == 0) {
        cores = 0;
    } else {
        k.counts[0] = tailBlocks;
        k.counts[1] = cores - 1 - tailBlocks;
        k.counts[2] = 1;
        k.elems[0] = big;
        k.elems[1] = small;
        k.elems[2] = last;
    }
    for (int i = 0; i < 3; ++i) {
        k.tiles[i] = k.elems[i] > 0 ? Ceil(k.elems[i], te) : 0;
        k.tail[i] = k.elems[i] > 0 ? k.elems[i] - (k.tiles[i] - 1) * te : 0;
    }
    const bool strideOk = tile % kGmAlignBytes == 0;
    k.aligned[0] = strideOk && ((big * elem) % kGmAlignBytes == 0 || tailBlocks <= 1);
    k.aligned[1] = strideOk && (big * tailBlocks * elem) % kGmAlignBytes == 0 && (small * elem) % kGmAlignBytes == 0;
    k.aligned[2] = strideOk && ((n - last) * elem) % kGmAlignBytes == 0;
    k.cores = cores;
    return k;
}

/** kd (computed for any tile) with the tiles and last-tile sizes of tiles of te elements. */
inline Kinds WithTile(Kinds kd, int64_t te) {
    for (int i = 0; i < 3; ++i) {
        kd.tiles[i] = kd.elems[i] > 0 ? Ceil(kd.elems[i], te) : 0;
        kd.tail[i] = kd.elems[i] > 0 ? kd.elems[i] - (kd.tiles[i] - 1) * te : 0;
    }
    return kd;
}

/** np.interp's arithmetic: exact at a point, else slope * (x - x_j) + y_j. */
inline double Interp(double x, const Curve& c) {
    const int last = c.points - 1;
    if (x >= c.bytes[last]) return c.us[last];
    if (x < c.bytes[0]) return c.us[0];
    int j = 0;
    while (j + 1 <= last && c.bytes[j + 1] <= x) ++j;
    if (c.bytes[j] == x) return c.us[j];
    const double slope = (c.us[j + 1] - c.us[j]) / (c.bytes[j + 1] - c.bytes[j]);
    return slope * (x - c.bytes[j]) + c.us[j];
}

/** One DMA of nbytes on one core whose share of the bandwidth is share GB/s. */
inline double CopyUs(double nbytes, const Curve& c, double share, bool aligned, double misaligned) {
    if (nbytes <= 0) return 0.0;
    const int last = c.points - 1;
    double t = nbytes <= c.bytes[last] ? Interp(nbytes, c) : c.us[last] + (nbytes - c.bytes[last]) * c.slope;
    t = std::max(t, c.fixed + nbytes / (share * 1e3));
    if (!aligned) t = c.fixed + (t - c.fixed) / misaligned;
    return t;
}

/** The values of a rows operand one tile reads (simulate.row_values). */
inline double RowValues(double elems, double rowLen) {
    if (elems <= 0) return 0.0;
    return std::min(elems, std::ceil(elems / rowLen) + 1.0);
}

inline double VectorUs(double elems, const KernelModel& k, const SocModel& s) {
    if (elems <= 0) return 0.0;
    double cycles = 0.0;
    for (int i = 0; i < k.opCount; ++i) {
        cycles += s.vectorStartCycles +
                  std::ceil(elems * k.ops[i].operandBytes / static_cast<double>(kRepeatBytes)) * k.ops[i].cyclesPerRepeat;
    }
    if (k.rowInputs > 0) {  // one Duplicate per row the tile touches
        const double r = static_cast<double>(k.rowLen);
        const double dup = s.vectorStartCycles +
                           std::ceil(std::min(r, elems) * static_cast<double>(k.rowExpandBytes) /
                                     static_cast<double>(kRepeatBytes)) * kDupCycles;
        cycles += static_cast<double>(k.rowInputs) * RowValues(elems, r) * dup;
    }
    return cycles / s.vectorMhz;
}

struct Stage {
    double in, vec, out;  // CopyIn, Compute, CopyOut of one tile
};

inline Stage StageOf(double elems, const KernelModel& k, const SocModel& s, double share, bool aligned, double vec,
                     double l2Share) {
    const double nbytes = elems * static_cast<double>(k.elemBytes);
    Stage st;
    st.in = static_cast<double>(k.fullInputs - k.rowInputs - k.workspaceInputs) *
            CopyUs(nbytes, s.mte2, share, aligned, s.misalignedFactor);
    if (k.workspaceInputs > 0) {  // a window of the core's row in L2, at any phase: misaligned
        st.in = st.in + static_cast<double>(k.workspaceInputs) *
                            CopyUs(nbytes, s.mte2, l2Share, false, s.misalignedFactor);
    }
    if (k.rowInputs > 0) {  // the row values start anywhere in GM: misaligned
        const double values = RowValues(elems, static_cast<double>(k.rowLen)) * static_cast<double>(k.elemBytes);
        st.in = st.in + static_cast<double>(k.rowInputs) * CopyUs(values, s.mte2, share, false, s.misalignedFactor);
    }
    st.vec = vec < 0 ? VectorUs(elems, k, s) : vec;
    st.out = static_cast<double>(k.outputs) * CopyUs(nbytes, s.mte3, share, aligned, s.misalignedFactor);
    return st;
}

/** simulate._pipeline_row: the last CopyOut's end of ntiles tiles through BUFFER_NUM bn buffers. */
inline double PipelineUs(int64_t ntiles, const Stage& full, const Stage& tail, int64_t bn) {
    double compHist[kWarmup + kPeriod + 1] = {0.0};
    double outHist[kWarmup + kPeriod + 1] = {0.0};
    double inEnd = 0.0, compEnd = 0.0, outEnd = 0.0;
    int64_t h = 1;
    auto step = [&](int64_t col, const Stage& st, double* ie, double* ce, double* oe) {
        const int64_t back = std::max<int64_t>(col - bn, -1) + 1;
        *ie = std::max(inEnd, compHist[back]) + st.in;
        *ce = std::max(std::max(*ie, compEnd), outHist[back]) + st.vec;
        *oe = std::max(*ce, outEnd) + st.out;
    };
    for (int64_t col = 0; col < std::min(kWarmup, ntiles); ++col) {
        double ie, ce, oe;
        step(col, ntiles - 1 == col ? tail : full, &ie, &ce, &oe);
        inEnd = ie;
        compEnd = ce;
        outEnd = oe;
        compHist[h] = compEnd;
        outHist[h] = outEnd;
        ++h;
    }
    if (ntiles > kWarmup) {
        const double period = (outHist[kWarmup] - outHist[kWarmup - kPeriod]) / static_cast<double>(kPeriod);
        const int64_t skip = (ntiles - kWarmup - 1) / kPeriod * kPeriod;
        const double shift = static_cast<double>(skip) * period;
        inEnd += shift;
        compEnd += shift;
        outEnd += shift;
        for (int64_t i = 1; i < h; ++i) {
            compHist[i] += shift;
            outHist[i] += shift;
        }
        const int64_t remaining = ntiles - kWarmup - skip;
        for (int64_t j = 0; j < kPeriod; ++j) {
            double ie, ce, oe;
            step(kWarmup + j, remaining - 1 == j ? tail : full, &ie, &ce, &oe);
            if (j < remaining) {
                inEnd = ie;
                compEnd = ce;
                outEnd = oe;
            }
            compHist[h] = compEnd;
            outHist[h] = outEnd;
            ++h;
        }
    }
    return outEnd;
}

/** Bytes over the aggregate bandwidth: what the launch can never beat (compiled._traffic). */
inline double TrafficUs(const Kinds& kd, const KernelModel& k, const SocModel& s, double agg) {
    const double elem = static_cast<double>(k.elemBytes);
    double covered = 0.0, csum = 0.0, misCores = 0.0;
    for (int i = 0; i < 3; ++i) {
        covered += static_cast<double>(kd.counts[i] * kd.elems[i]);
        csum += static_cast<double>(kd.counts[i]);
        if (!kd.aligned[i]) misCores += static_cast<double>(kd.counts[i]);
    }
    const double scalarBytes = static_cast<double>(k.scalarInputs * k.elemBytes);
    const double rows = k.rowInputs > 0 ? static_cast<double>(k.rowInputs) * (covered / static_cast<double>(k.rowLen)) : 0.0;
    const double bytes = (static_cast<double>(k.HbmStreams()) * covered + rows) * elem + scalarBytes +
                         static_cast<double>(kd.cores * (k.workspaceInputs * k.rowBytes));
    const double misaligned = 1.0 - misCores / std::max(csum, 1.0) * (1.0 - s.misalignedFactor);
    return bytes / (agg * 1e3 * misaligned);
}

/** The share of a launch's traffic over n elements that hits L2 in the steady state of repeated launches
 *  (simulate.SteadyL2 on ElementwiseKernel.hbm_bytes, capped at the resident share): the L2 state every prediction assumes. */
inline double SteadyHit(const KernelModel& k, const SocModel& s, int64_t n) {
    const double nn = static_cast<double>(n);
    const double rows = k.rowInputs > 0 ? static_cast<double>(k.rowInputs) * (nn / static_cast<double>(k.rowLen)) : 0.0;
    const double footprint = (static_cast<double>(k.HbmStreams()) * nn + rows) * static_cast<double>(k.elemBytes);
    const double resident = std::min(1.0, s.l2Bytes / std::max(footprint, 1.0));
    return std::min(1.0 / (1.0 + std::pow(footprint / s.l2HalfBytes, s.l2Falloff)), resident);
}

/** The aggregate bandwidth with this L2 hit share, as compiled._refit computes it. */
inline double Aggregate(const SocModel& s, double hit) { return 1.0 / ((1.0 - hit) / s.hbmGbps + hit / s.l2Gbps); }

struct Prediction {
    double us;       // the prediction (exact) or the lower bound (bounded only)
    double lower;    // launch + max(chain bound, traffic)
    bool certain;    // the lower bound is the prediction
};

/** compiled._evaluate (``hit``: the L2 hit share): exact simulates every core kind; else only the bounds
 *  are computed. */
inline Prediction Evaluate(const Kinds& kd, int64_t te, int64_t bn, const KernelModel& k, const SocModel& s,
                           bool exact, double fullVec, double hit) {
    const double active = static_cast<double>(std::max<int64_t>(kd.cores, 1));
    const double agg = Aggregate(s, hit);
    const double share = agg / active;
    const double l2Share = s.l2Gbps / active;
    const double rowUs = static_cast<double>(k.workspaceInputs) * CopyUs(static_cast<double>(k.rowBytes), s.mte2, share, true, 1.0);
    double coreUs = 0.0, lowerCore = 0.0, upperCore = 0.0;
    int slowest = -1;
    bool single = true;
    int fullFor = -1;
    Stage full{0.0, 0.0, 0.0};
    const double bnd = static_cast<double>(bn);
    for (int i = 0; i < 3; ++i) {
        const int64_t nt = kd.tiles[i];
        if (kd.counts[i] <= 0 || nt <= 0) continue;
        single = single && nt <= 1;
        Stage f;
        if (nt > 1) {
            if (fullFor != static_cast<int>(kd.aligned[i])) {
                full = StageOf(static_cast<double>(te), k, s, share, kd.aligned[i], fullVec, l2Share);
                fullFor = static_cast<int>(kd.aligned[i]);
            }
            f = full;
        } else {
            f = StageOf(0.0, k, s, share, kd.aligned[i], 0.0, l2Share);
        }
        const Stage t = StageOf(static_cast<double>(kd.tail[i]), k, s, share, kd.aligned[i], -1.0, l2Share);
        const int64_t nfull = nt - 1;
        const double nf = static_cast<double>(nfull);
        const double a1 = nt <= 1 ? t.in : f.in;
        const double b1 = nt <= 1 ? t.vec : f.vec;
        const double hops = static_cast<double>(nfull / bn);
        const double chain = std::max(
            std::max(nf * f.in + t.in + t.vec + t.out, a1 + nf * f.vec + t.vec + t.out),
            std::max(a1 + b1 + nf * f.out + t.out,
                     std::max(hops * (f.in + f.vec) + t.in + t.vec + t.out, a1 + hops * (f.vec + f.out) + t.vec + t.out)));
        lowerCore = std::max(lowerCore, chain + s.coreStartUs + rowUs);
        const double fa = std::max(f.in, t.in), fb = std::max(f.vec, t.vec), fc = std::max(f.out, t.out);
        const double period = std::max(std::max(std::max(fa, fb), std::max(fc, (fa + fb) / bnd)), (fb + fc) / bnd);
        upperCore = std::max(upperCore, nf * period + fa + fb + fc + s.coreStartUs + rowUs);
        if (exact) {
            const double end = PipelineUs(nt, f, t, bn) + s.coreStartUs + rowUs;
            if (slowest < 0 || end > coreUs) {
                slowest = i;
                coreUs = end;
            }
        }
    }
    const double bandwidthUs = TrafficUs(kd, k, s, agg);
    const bool launched = kd.cores > 0;
    Prediction p;
    p.us = launched && exact ? s.launchUs + std::max(coreUs, bandwidthUs) : 0.0;
    p.lower = launched ? s.launchUs + std::max(lowerCore, bandwidthUs) : 0.0;
    p.certain = !launched || single || upperCore * (1 + kBoundSlack) + kBoundSlack < bandwidthUs;
    return p;
}

/** np.round(us, 9) as numba computes it: rint(us * 1e9) / 1e9 (us itself if that overflows). */
inline double TieKey(double us) {
    const double y = us * kTieScale;
    return std::isinf(y) ? us : std::nearbyint(y) / kTieScale;
}

/** What a re-fit did (for benchmarks and for tuning its bounds). */
struct RefitStats {
    int64_t visited = 0;  // (block, cores, tile) configurations looked at past the traffic bound
    int64_t bounded = 0;
    int64_t simulated = 0;
};

struct RefitChoice {
    int64_t blockBytes;  // -1: no tile fits
    int64_t tileBytes;
    int64_t coreNum;
    double us;
};

/**
 * A lower bound of any exact tiling's prediction with a given core count and tiles of at most teMax
 * elements, from what a core must do whatever its tile: every element copied in, computed and copied
 * out, each copy at least the curve's fixed cost plus its bytes at the core's bandwidth share, each
 * tile's instructions at least their start cycles plus the elements' repeats, and the pipeline no
 * shorter than simulate.bounds_us's chains. It only rises as teMax falls (more tiles), so a core
 * count it rules out at one tile is ruled out at every smaller tile. Valid for misaligned factors
 * <= 1 (a misaligned copy is never faster); -INFINITY otherwise. What does not depend on the tile is
 * computed once per core count.
 */
class CoreBound {
public:
    CoreBound() = default;
    /** The vector time of a tile of x elements is at least fixed + x * perElem (VectorFloor). */
    struct VectorFloor {
        double fixed, perElem;
        VectorFloor(const KernelModel& k, const SocModel& s) : fixed(0.0), perElem(0.0) {
            for (int i = 0; i < k.opCount; ++i) {
                fixed += s.vectorStartCycles;
                perElem += k.ops[i].operandBytes / static_cast<double>(kRepeatBytes) * k.ops[i].cyclesPerRepeat;
            }
            fixed /= s.vectorMhz;
            perElem /= s.vectorMhz;
        }
    };

    CoreBound(const Kinds& kd, int64_t bn, const KernelModel& k, const SocModel& s, double agg, const VectorFloor& vec)
        : bn_(bn) {
        if (s.misalignedFactor > 1.0 || s.mte2.fixed < 0.0 || s.mte3.fixed < 0.0 || kd.cores <= 0) return;
        vecFixed_ = vec.fixed;
        vecPerElem_ = vec.perElem;
        const double share = agg / static_cast<double>(kd.cores);
        const double perByte = 1.0 / (share * 1e3);
        const double elem = static_cast<double>(k.elemBytes);
        fin_ = static_cast<double>(k.fullInputs) * s.mte2.fixed;
        // the rows' few values: not bounded; the workspace windows at the L2 share
        pin_ = static_cast<double>(k.fullInputs - k.rowInputs - k.workspaceInputs) * elem * perByte +
               static_cast<double>(k.workspaceInputs) * elem / (s.l2Gbps / static_cast<double>(kd.cores) * 1e3);
        fout_ = static_cast<double>(k.outputs) * s.mte3.fixed;
        pout_ = static_cast<double>(k.outputs) * elem * perByte;
        base_ = s.launchUs + s.coreStartUs +
                static_cast<double>(k.workspaceInputs) * CopyUs(static_cast<double>(k.rowBytes), s.mte2, share, true, 1.0);
        for (int i = 0; i < 3; ++i) {
            if (kd.counts[i] > 0 && kd.elems[i] > 0) elems_[kinds_++] = kd.elems[i];
        }
    }

    double Us(int64_t teMax) const {
        double core = -INFINITY;
        const double last = fin_ + vecFixed_ + fout_;  // the last tile's CopyIn, Compute and CopyOut
        for (int i = 0; i < kinds_; ++i) {
            const double e = static_cast<double>(elems_[i]);
            const int64_t tiles = Ceil(elems_[i], teMax);
            const double t = static_cast<double>(tiles);
            const double hops = static_cast<double>((tiles - 1) / bn_);
            const double spread = std::max(0.0, e / static_cast<double>(bn_) - static_cast<double>(teMax));
            const double chain = std::max(
                std::max(t * fin_ + e * pin_ + vecFixed_ + fout_, fin_ + t * vecFixed_ + e * vecPerElem_ + fout_),
                std::max(fin_ + vecFixed_ + t * fout_ + e * pout_, hops * (fin_ + vecFixed_) + spread * (pin_ + vecPerElem_) + last));
            core = std::max(core, chain);
        }
        return base_ + core;
    }

    /**
     * The chain bound of one configuration (tiles of te elements, kd's tiles and last tiles) with each
     * stage at its linear floor: below simulate.bounds_us's chains, and far cheaper to compute.
     */
    double ConfigUs(const Kinds& kd, int64_t te) const {
        double core = -INFINITY;
        const double x = static_cast<double>(te);
        const double fa = fin_ + x * pin_, fb = vecFixed_ + x * vecPerElem_, fc = fout_ + x * pout_;
        for (int i = 0; i < 3; ++i) {
            if (kd.counts[i] <= 0 || kd.tiles[i] <= 0) continue;
            const double y = static_cast<double>(kd.tail[i]);
            const double ta = fin_ + y * pin_, tb = vecFixed_ + y * vecPerElem_, tc = fout_ + y * pout_;
            const bool many = kd.tiles[i] > 1;
            const double nf = static_cast<double>(kd.tiles[i] - 1);
            const double a = many ? fa : 0.0, b = many ? fb : 0.0, c = many ? fc : 0.0;
            const double a1 = many ? fa : ta, b1 = many ? fb : tb;
            const double hops = static_cast<double>((kd.tiles[i] - 1) / bn_);
            const double chain = std::max(
                std::max(nf * a + ta + tb + tc, a1 + nf * b + tb + tc),
                std::max(a1 + b1 + nf * c + tc, std::max(hops * (a + b) + ta + tb + tc, a1 + hops * (b + c) + tb + tc)));
            core = std::max(core, chain);
        }
        return base_ + core;
    }

private:
    int64_t bn_ = 1;
    int64_t elems_[3] = {0, 0, 0};
    int kinds_ = 0;  // none: the bound is -INFINITY
    double vecFixed_ = 0.0, vecPerElem_ = 0.0, fin_ = 0.0, pin_ = 0.0, fout_ = 0.0, pout_ = 0.0, base_ = 0.0;
};

constexpr int64_t kMaxCores = 64;   // vector cores of a SoC the re-fit spreads over, at most
constexpr int kMaxBlocks = 16;      // block sizes one re-fit chooses among, at most

/** Per (block, core count) pair, what does not depend on the tile; reused across calls per thread. */
struct RefitScratch {
    bool known[kMaxBlocks][kMaxCores + 1];
    double traffic[kMaxBlocks][kMaxCores + 1];
    Kinds kinds[kMaxBlocks][kMaxCores + 1];
    int64_t widest[kMaxBlocks][kMaxCores + 1];  // elements of the widest core: one tile per core from that tile up
    CoreBound floors[kMaxBlocks][kMaxCores + 1];
    // Pairs as (cores, block index) in visiting order: more cores first, then the larger block.
    int32_t alive[kMaxBlocks * kMaxCores];
    int32_t merged[kMaxBlocks * kMaxCores];
    int32_t wake[1024];                         // per tile index: the first pair that is more than one tile again there
    int32_t next[kMaxBlocks * (kMaxCores + 1)]; // the next pair of the same wake list
};

constexpr int64_t kMaxTiles = 1023;  // tile choices one re-fit walks, at most (512 B .. 511.5 KiB)

/**
 * compiled._refit: the fastest (block, tile, cores) of one BUFFER_NUM at n elements, cold L2, blocks in
 * descending order, with the space's tie-break (predictions rounded to 1e-9 us, then the larger tile,
 * more cores, the larger block). One pass in tie-break order: a configuration wins only by a smaller
 * rounded prediction, so each is skipped at the first bound that rules that out. Two bounds hold for
 * every smaller tile too, so a (block, core count) pair they rule out is dropped at once: the traffic
 * bound (it does not depend on the tile: tiles are whole 512-B blocks, the stride always aligned;
 * before a pair's kinds are known, its bytes at the full bandwidth stand in) and CoreBound. What is
 * left gets CoreBound::ConfigUs, then the chain bound, then, if that does not settle it, the
 * simulation. A pair whose every core fits in one tile is the same tiling at every tile down to its
 * widest core's size, which cannot win the tie: it sleeps until that tile. tileTop is the largest
 * tile that fits the UB (tiles are kTileStepBytes, 2*kTileStepBytes, ..., up to it); the seed (the
 * bucket's tuned block, tile and cores; 0 for none) is simulated first and prunes from the start.
 *
 * The extra drops never change compiled._refit's answer: a dropped configuration's prediction is at
 * or above the fastest already seen (so it neither wins nor lowers that), or more than a tie's width
 * above the seed's (which beats it).
 */
inline RefitChoice Refit(int64_t n, const int64_t* blocks, int nBlocks, int64_t bn, int64_t tileTop, int64_t maxCores,
                         const KernelModel& k, const SocModel& s, int64_t seedBlock, int64_t seedTile,
                         int64_t seedCores, RefitStats* stats = nullptr) {
    static thread_local RefitScratch w;
    RefitChoice best{-1, -1, -1, INFINITY};
    const int64_t tiles = std::min(tileTop / kTileStepBytes, kMaxTiles);
    if (n <= 0 || nBlocks <= 0 || nBlocks > kMaxBlocks || tiles < 1) return best;
    const int64_t elem = k.elemBytes;
    const double hit = SteadyHit(k, s, n);
    const double agg = Aggregate(s, hit);
    const CoreBound::VectorFloor vecFloor(k, s);
    const double rows = k.rowInputs > 0 ? static_cast<double>(k.rowInputs) * (static_cast<double>(n) / static_cast<double>(k.rowLen)) : 0.0;
    const double fixedBytes = (static_cast<double>(k.HbmStreams()) * static_cast<double>(n) + rows) * static_cast<double>(elem) +
                              static_cast<double>(k.scalarInputs * k.elemBytes);
    int64_t coresMax[kMaxBlocks];
    int64_t topCores = 0;
    for (int b = 0; b < nBlocks; ++b) {
        coresMax[b] = std::min(std::min(maxCores, std::max<int64_t>(Ceil(n * elem, blocks[b]), 1)), kMaxCores);
        topCores = std::max(topCores, coresMax[b]);
    }
    auto order = [&](int32_t pair) { return (topCores - pair / kMaxBlocks) * kMaxBlocks + pair % kMaxBlocks; };
    int64_t nAlive = 0;
    for (int64_t c = topCores; c >= 1; --c) {
        const double floor = s.launchUs + (fixedBytes + static_cast<double>(c * (k.workspaceInputs * k.rowBytes))) / (agg * 1e3);
        for (int b = 0; b < nBlocks; ++b) {
            w.known[b][c] = false;
            if (c > coresMax[b]) continue;
            w.traffic[b][c] = floor;
            w.alive[nAlive++] = static_cast<int32_t>(c * kMaxBlocks + b);
        }
    }
    for (int64_t ti = 0; ti <= tiles; ++ti) w.wake[ti] = -1;
    double seedUs = INFINITY;
    for (int b = 0; b < nBlocks; ++b) {
        if (blocks[b] == seedBlock && 1 <= seedCores && seedCores <= coresMax[b] && seedTile >= kTileStepBytes &&
            seedTile % kTileStepBytes == 0 && seedTile <= tiles * kTileStepBytes) {
            seedUs = Evaluate(KindsOf(n, elem, seedBlock, seedTile, seedCores), seedTile / elem, bn, k, s, true, -1.0, hit).us;
        }
    }
    const double seedTie = seedUs + 1.0 / kTieScale;  // more than a tie's width above the seed: the seed beats it
    double bestUs = INFINITY, bestKey = INFINITY;
    for (int64_t ti = tiles; ti >= 1; --ti) {
        if (w.wake[ti] >= 0) {  // merge the pairs that wake here into the visiting order
            int64_t m = 0, a = 0;
            for (int32_t p = w.wake[ti]; p >= 0 || a < nAlive;) {
                if (p >= 0 && (a >= nAlive || order(p) < order(w.alive[a]))) {
                    w.merged[m++] = p;
                    p = w.next[p];
                } else {
                    w.merged[m++] = w.alive[a++];
                }
            }
            std::copy(w.merged, w.merged + m, w.alive);
            nAlive = m;
        }
        if (nAlive == 0) continue;
        const int64_t tile = ti * kTileStepBytes;
        const int64_t te = tile / elem;
        const double fullVec = VectorUs(static_cast<double>(te), k, s);
        int64_t kept = 0;
        for (int64_t a = 0; a < nAlive; ++a) {
            const int32_t pair = w.alive[a];
            const int64_t c = pair / kMaxBlocks;
            const int b = pair % kMaxBlocks;
            if (w.traffic[b][c] >= bestUs || w.traffic[b][c] > seedUs) continue;  // and at every smaller tile
            if (!w.known[b][c]) {
                w.known[b][c] = true;
                const Kinds& kd0 = w.kinds[b][c] = KindsOf(n, elem, blocks[b], kTileStepBytes, c);
                w.widest[b][c] = 0;  // over the kinds that have cores: the others do not enter a prediction
                for (int i = 0; i < 3; ++i) {
                    if (kd0.counts[i] > 0) w.widest[b][c] = std::max(w.widest[b][c], kd0.elems[i]);
                }
                w.traffic[b][c] = s.launchUs + TrafficUs(kd0, k, s, agg);
                w.floors[b][c] = CoreBound(kd0, bn, k, s, agg, vecFloor);
                if (w.traffic[b][c] >= bestUs || w.traffic[b][c] > seedUs) continue;
            }
            if (stats) ++stats->visited;
            const double floor = w.floors[b][c].Us(te);
            const double margin = kPruneMarginUs + 1e-9 * std::fabs(floor);  // float rounding, generously
            if (floor - margin >= bestUs || floor - margin > seedTie) continue;  // and at every smaller tile
            if (te >= w.widest[b][c]) {
                // Every core one tile: the same prediction at every tile down to the widest core's, where a
                // smaller tile cannot win the tie. Evaluated here once, then asleep until that tile.
                const int64_t again = Ceil(w.widest[b][c] * elem, kTileStepBytes) - 1;
                if (again >= 1) {
                    int32_t* link = &w.wake[again];
                    while (*link >= 0 && order(*link) < order(pair)) link = &w.next[*link];
                    w.next[pair] = *link;
                    *link = pair;
                }
            } else {
                w.alive[kept++] = pair;
            }
            const Kinds kd = WithTile(w.kinds[b][c], te);  // == KindsOf(n, elem, blocks[b], tile, c)
            const double linear = w.floors[b][c].ConfigUs(kd, te);
            const double gap = kPruneMarginUs + 1e-9 * std::fabs(linear);
            if (linear - gap >= bestUs || linear - gap > seedTie) continue;
            const Prediction bound = Evaluate(kd, te, bn, k, s, false, fullVec, hit);
            if (stats) ++stats->bounded;
            const double slack = kPruneMarginUs + kPruneRelative * bound.lower;
            if (bound.lower - slack >= bestUs || bound.lower - slack > seedUs) continue;
            if (stats && !bound.certain) ++stats->simulated;
            const double us = bound.certain ? bound.lower : Evaluate(kd, te, bn, k, s, true, fullVec, hit).us;
            const double key = TieKey(us);
            if (key < bestKey) {
                bestKey = key;
                best.blockBytes = blocks[b];
                best.tileBytes = tile;
                best.coreNum = c;
            }
            bestUs = std::min(bestUs, us);
        }
        nAlive = kept;
    }
    best.us = bestUs;
    return best;
}

}  // namespace cost
}  // namespace bce_grad

#endif  // BCE_GRAD_COST_MODEL_H
