/**
 * The cost model's engine: one tiling's prediction (Evaluate), the bounds that prune a search, and the
 * re-fit of a tuned bucket's block size, core count and tile at an exact element count (Refit). It is
 * the only scalar implementation of the model: the CANN TilingFunc compiles it through
 * bce_grad_tuned_tiling.h, and Python calls the same code through the tiling_model._engine binding
 * (tiling_model/engine.py) for the service, the tuner's seeding, the explorer and `predict`.
 * tiling_model/simulate.py (NumPy, vectorised) is its readable specification: the engine computes the
 * same operations on the same doubles in the same order, so tests/tiling_model/test_engine.py checks
 * the two agree to the bit.
 *
 * Pure C++17, no CANN headers, no heap allocation. The numbers it reads (the SoC's DMA curves, clocks
 * and bandwidths, the kernel's streams and instructions) are generated into bce_grad_tuned_table.h from
 * the SoC profiles and tiling_model.kernels for the build, and filled from the same objects by the
 * binding. Compile without -ffast-math and without FMA contraction (-ffp-contract=off; GCC contracts by
 * default in its GNU dialects where the target has FMA, e.g. aarch64 hosts), or a tie may break
 * differently from the specification's.
 */
#ifndef BCE_GRAD_COST_MODEL_H
#define BCE_GRAD_COST_MODEL_H

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace bce_grad {
namespace cost {

// tiling_model/simulate.py and space.py (tests/kernel/test_tuned_header.py checks they agree)
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
    // A device's effects the hardware parameters cannot express, fitted on its measurements of bcetune's
    // kernel (tiling_model.correction): a factor on the prediction per block size class (kBlockClasses,
    // by the power of two at or below the block), per BUFFER_NUM (kBufferClasses) and per tile alignment
    // (kAlignClasses: 512 B, 1 KiB, 2 KiB, 4 KiB or more) and per count of cores that run (kCoreClasses).
    // nullptr: 1 everywhere (the shipped profiles).
    const double* blockFactor = nullptr;
    const double* bufferFactor = nullptr;
    const double* alignFactor = nullptr;
    const double* coreFactor = nullptr;
};

constexpr int kBlockClasses = 16;  // 1 B .. 32 KiB
constexpr int kBufferClasses = 5;  // BUFFER_NUM 0 .. 4
constexpr int kAlignClasses = 4;   // 512 B, 1 KiB, 2 KiB, >= 4 KiB (a tile's largest such divisor)
constexpr int kCoreClasses = 65;   // cores that run: 0 .. 64

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
    int64_t scalarQueueBytes = 0;  // the seed kernel's per-tile grad queue (0: the exact kernels)
    bool corrected = false;        // bcetune's own kernel: the SoC's knob correction applies to it
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
    if (k.scalarQueueBytes > 0 && elems > 0) {  // the seed kernel's grad: one small aligned copy per tile
        st.in = st.in + CopyUs(static_cast<double>(k.scalarQueueBytes), s.mte2, share, true, 1.0);
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

/** What a launch moves and the time that takes over the aggregate bandwidth: what it can never beat. */
struct Traffic {
    double bytes;
    double us;
};

inline Traffic TrafficOf(const Kinds& kd, const KernelModel& k, const SocModel& s, double agg) {
    const double elem = static_cast<double>(k.elemBytes);
    double covered = 0.0, queued = 0.0, csum = 0.0, misCores = 0.0;
    for (int i = 0; i < 3; ++i) {
        covered += static_cast<double>(kd.counts[i] * kd.elems[i]);
        queued += static_cast<double>(kd.counts[i] * kd.tiles[i]);
        csum += static_cast<double>(kd.counts[i]);
        if (!kd.aligned[i]) misCores += static_cast<double>(kd.counts[i]);
    }
    double scalarBytes = static_cast<double>(k.scalarInputs * k.elemBytes);
    if (k.scalarQueueBytes > 0) scalarBytes = queued * static_cast<double>(k.scalarQueueBytes);
    const double rows = k.rowInputs > 0 ? static_cast<double>(k.rowInputs) * (covered / static_cast<double>(k.rowLen)) : 0.0;
    const double bytes = (static_cast<double>(k.HbmStreams()) * covered + rows) * elem + scalarBytes +
                         static_cast<double>(kd.cores * (k.workspaceInputs * k.rowBytes));
    const double misaligned = 1.0 - misCores / std::max(csum, 1.0) * (1.0 - s.misalignedFactor);
    return Traffic{bytes, bytes / (agg * 1e3 * misaligned)};
}

inline double TrafficUs(const Kinds& kd, const KernelModel& k, const SocModel& s, double agg) {
    return TrafficOf(kd, k, s, agg).us;
}

/** The L2 state a prediction assumes (simulate.L2State): the SoC's steady state of repeated launches,
 *  cold (first touch, all HBM: kDefaultL2), warm (the resident share hits), or an explicit steady curve. */
struct L2State {
    enum Kind { Steady = 0, Cold = 1, Warm = 2, Curve = 3 };
    Kind kind = Steady;
    double halfBytes = 0.0;  // Curve only: simulate.SteadyL2's half point, falloff and L2 size
    double falloff = 0.0;
    double l2Bytes = 0.0;
};

/** Bytes a launch over n elements moves element by element (ElementwiseKernel.hbm_bytes): L2's footprint. */
inline double Footprint(const KernelModel& k, int64_t n) {
    const double nn = static_cast<double>(n);
    const double rows = k.rowInputs > 0 ? static_cast<double>(k.rowInputs) * (nn / static_cast<double>(k.rowLen)) : 0.0;
    return (static_cast<double>(k.HbmStreams()) * nn + rows) * static_cast<double>(k.elemBytes);
}

/** The share of a footprint the L2 can hold (simulate.resident_share). */
inline double ResidentShare(double footprint, double l2Bytes) { return std::min(1.0, l2Bytes / std::max(footprint, 1.0)); }

/** simulate.SteadyL2.hit: 1 / (1 + (F / half) ^ falloff), at most the resident share. */
inline double SteadyShare(double footprint, double halfBytes, double falloff, double l2Bytes) {
    const double ratio = footprint / halfBytes;
    return std::min(1.0 / (1.0 + std::pow(ratio, falloff)), ResidentShare(footprint, l2Bytes));
}

/** The share of a launch's traffic over n elements that hits L2 in the given state (simulate.l2_hit). */
inline double L2Hit(const KernelModel& k, const SocModel& s, int64_t n, const L2State& state) {
    const double f = Footprint(k, n);
    switch (state.kind) {
        case L2State::Cold: return 0.0;
        case L2State::Warm: return ResidentShare(f, s.l2Bytes);
        case L2State::Curve: return SteadyShare(f, state.halfBytes, state.falloff, state.l2Bytes);
        default: return SteadyShare(f, s.l2HalfBytes, s.l2Falloff, s.l2Bytes);
    }
}

/** The L2 state bcetune tunes for and predicts by default (simulate.DEFAULT_L2): cold. In training the
 *  kernel's inputs (the forward's probabilities, the labels) were written long before the backward pass
 *  reads them, and the NPU backend times it the same way (L2 flushed before every sample). */
constexpr L2State::Kind kDefaultL2 = L2State::Cold;

/** The hit share of the default state: what the re-fit and the build assume. */
inline double DefaultHit(const KernelModel& k, const SocModel& s, int64_t n) {
    return L2Hit(k, s, n, L2State{kDefaultL2, 0.0, 0.0, 0.0});
}

/** The aggregate bandwidth with this L2 hit share (simulate._costs's agg). */
inline double Aggregate(const SocModel& s, double hit) { return 1.0 / ((1.0 - hit) / s.hbmGbps + hit / s.l2Gbps); }

/** One tiling's prediction (simulate.BatchResult's row), its lower bound and whether that bound is it. */
struct Prediction {
    double us = 0.0;          // the prediction (exact) or the lower bound (bounded only)
    double lower = 0.0;       // launch + max(chain bound, traffic)
    bool certain = false;     // the lower bound is the prediction
    double coreUs = 0.0;      // slowest core, start-up included (exact only)
    double bandwidthUs = 0.0; // bytes moved over the aggregate bandwidth
    double busy[3] = {0.0, 0.0, 0.0};  // MTE2, V, MTE3 busy time of the slowest core (exact only)
    double bytesMoved = 0.0;
    double rooflineUs = 0.0;  // launch + bytes over the peak bandwidth mix
};

/**
 * The staircase paths of a core's schedule that turn at its last full tile (tile t-1; the tail t is often
 * small): all CopyIns but the tail's, that tile's Compute and CopyOut, the tail's CopyOut; the same with
 * the tail's Compute; the first CopyIn, every Compute but the tail's, then the last two CopyOuts. Each
 * stage waits for the one before it on such a path, so each is a lower bound (simulate._bounds).
 */
inline double Turns(double nf, const Stage& f, const Stage& t) {
    return std::max(std::max(nf * f.in + f.vec + f.out + t.out, nf * f.in + f.vec + t.vec + t.out),
                    f.in + nf * f.vec + f.out + t.out);
}

/** One tiling (its core kinds, tiles of te elements, BUFFER_NUM bn) at L2 hit share hit: with exact, every
 *  core kind's pipeline is simulated (simulate.simulate); else only the bounds (simulate.bounds_us).
 *  fullVec: the full tile's vector time if the caller has it (< 0: computed here). */
inline Prediction Evaluate(const Kinds& kd, int64_t te, int64_t bn, const KernelModel& k, const SocModel& s,
                           bool exact, double fullVec, double hit) {
    const double active = static_cast<double>(std::max<int64_t>(kd.cores, 1));
    const double agg = Aggregate(s, hit);
    const double share = agg / active;
    const double l2Share = s.l2Gbps / active;
    const double rowUs = static_cast<double>(k.workspaceInputs) * CopyUs(static_cast<double>(k.rowBytes), s.mte2, share, true, 1.0);
    double coreUs = 0.0, lowerCore = 0.0, upperCore = 0.0;
    double busy[3] = {0.0, 0.0, 0.0};
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
        if (nt > 1) {  // the full tile's stage depends on the alignment only: kinds share it
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
            std::max(std::max(nf * f.in + t.in + t.vec + t.out, a1 + nf * f.vec + t.vec + t.out),
                     std::max(a1 + b1 + nf * f.out + t.out,
                              std::max(hops * (f.in + f.vec) + t.in + t.vec + t.out, a1 + hops * (f.vec + f.out) + t.vec + t.out))),
            Turns(nf, f, t));
        lowerCore = std::max(lowerCore, chain + s.coreStartUs + rowUs);
        const double fa = std::max(f.in, t.in), fb = std::max(f.vec, t.vec), fc = std::max(f.out, t.out);
        const double period = std::max(std::max(std::max(fa, fb), std::max(fc, (fa + fb) / bnd)), (fb + fc) / bnd);
        upperCore = std::max(upperCore, nf * period + fa + fb + fc + s.coreStartUs + rowUs);
        if (exact) {
            const double end = PipelineUs(nt, f, t, bn) + s.coreStartUs + rowUs;
            if (slowest < 0 || end > coreUs) {  // argmax: the first kind of the largest time
                slowest = i;
                coreUs = end;
                busy[0] = nf * f.in + t.in;
                busy[1] = nf * f.vec + t.vec;
                busy[2] = nf * f.out + t.out;
            }
        }
    }
    const Traffic traffic = TrafficOf(kd, k, s, agg);
    const bool launched = kd.cores > 0;
    const double aggPeak = 1.0 / ((1.0 - hit) / s.hbmPeakGbps + hit / s.l2PeakGbps);
    Prediction p;
    p.us = launched && exact ? s.launchUs + std::max(coreUs, traffic.us) : 0.0;
    p.lower = launched ? s.launchUs + std::max(lowerCore, traffic.us) : 0.0;
    p.certain = !launched || single || upperCore * (1 + kBoundSlack) + kBoundSlack < traffic.us;
    p.coreUs = coreUs;
    p.bandwidthUs = traffic.us;
    for (int i = 0; i < 3; ++i) p.busy[i] = busy[i];
    p.bytesMoved = traffic.bytes;
    p.rooflineUs = launched ? s.launchUs + traffic.bytes / (aggPeak * 1e3) : 0.0;
    return p;
}

/** Evaluate(kd, te, bn, k, s, true, ..., hit).us where every core runs one tile (te at or above each kind's
 *  elements), to the bit: one tile's pipeline is its three stages in a row, nothing to schedule or bound. */
inline double OneTileUs(const Kinds& kd, const KernelModel& k, const SocModel& s, double hit) {
    if (kd.cores <= 0) return 0.0;
    const double agg = Aggregate(s, hit);
    const double active = static_cast<double>(kd.cores);
    const double share = agg / active;
    const double l2Share = s.l2Gbps / active;
    const double rowUs = static_cast<double>(k.workspaceInputs) * CopyUs(static_cast<double>(k.rowBytes), s.mte2, share, true, 1.0);
    double coreUs = 0.0;
    for (int i = 0; i < 3; ++i) {
        if (kd.counts[i] <= 0 || kd.tiles[i] <= 0) continue;
        const Stage t = StageOf(static_cast<double>(kd.tail[i]), k, s, share, kd.aligned[i], -1.0, l2Share);
        coreUs = std::max(coreUs, t.in + t.vec + t.out + s.coreStartUs + rowUs);
    }
    return s.launchUs + std::max(coreUs, TrafficUs(kd, k, s, agg));
}

/** One core kind's schedule as the explorer draws it: the stages of a full and of the last tile, and the
 *  end of the kind's last CopyOut from the core's start (what Evaluate simulates for that kind). */
struct KindPipeline {
    Stage full{0.0, 0.0, 0.0};
    Stage tail{0.0, 0.0, 0.0};
    double endUs = 0.0;
};

/** Kind i of kd as Evaluate schedules it (rowUs: the core's start-up copy of the last-dim rows). */
inline KindPipeline PipelineOf(const Kinds& kd, int i, int64_t te, int64_t bn, const KernelModel& k,
                               const SocModel& s, double hit, double* rowUs) {
    const double active = static_cast<double>(std::max<int64_t>(kd.cores, 1));
    const double share = Aggregate(s, hit) / active;
    const double l2Share = s.l2Gbps / active;
    *rowUs = static_cast<double>(k.workspaceInputs) * CopyUs(static_cast<double>(k.rowBytes), s.mte2, share, true, 1.0);
    KindPipeline p;
    const int64_t nt = kd.tiles[i];
    if (kd.counts[i] <= 0 || nt <= 0) return p;
    p.full = nt > 1 ? StageOf(static_cast<double>(te), k, s, share, kd.aligned[i], -1.0, l2Share)
                    : StageOf(0.0, k, s, share, kd.aligned[i], 0.0, l2Share);
    p.tail = StageOf(static_cast<double>(kd.tail[i]), k, s, share, kd.aligned[i], -1.0, l2Share);
    p.endUs = PipelineUs(nt, p.full, p.tail, bn);
    return p;
}

/** The block size class of a block (the power of two at or below it, as its exponent). */
inline int BlockClass(int64_t block) {
    int c = 0;
    while (c + 1 < kBlockClasses && (int64_t{1} << (c + 1)) <= block) ++c;
    return c;
}

/** The tile alignment class of a tile (its largest divisor among 512 B, 1, 2 and 4 KiB; 0 below 512 B). */
inline int AlignClass(int64_t tile) {
    int c = 0;
    while (c + 1 < kAlignClasses && tile % (kGmAlignBytes << (c + 1)) == 0) ++c;
    return c;
}

/** The SoC's knob correction for a configuration (simulate.knob_factors): ((block x buffers) x alignment) x
 *  cores (those that run), 1 for a kernel it does not apply to or a SoC without one. */
inline double KnobFactor(const SocModel& s, const KernelModel& k, int64_t block, int64_t bn, int64_t tile,
                         int64_t cores) {
    if (!k.corrected || s.blockFactor == nullptr) return 1.0;
    const int b = static_cast<int>(std::min<int64_t>(std::max<int64_t>(bn, 0), kBufferClasses - 1));
    const int c = static_cast<int>(std::min<int64_t>(std::max<int64_t>(cores, 0), kCoreClasses - 1));
    return s.blockFactor[BlockClass(block)] * s.bufferFactor[b] * s.alignFactor[AlignClass(tile)] * s.coreFactor[c];
}

/** The least KnobFactor over tile alignments (block < 0: over block sizes too; cores < 0: over core counts
 *  too): a bound's factor. Each least is one the product can take, so it is below every product. */
inline double KnobFactorFloor(const SocModel& s, const KernelModel& k, int64_t block, int64_t bn, int64_t cores) {
    if (!k.corrected || s.blockFactor == nullptr) return 1.0;
    double blockF = INFINITY, alignF = INFINITY, coreF = INFINITY;
    for (int c = 0; c < kBlockClasses; ++c) blockF = std::min(blockF, s.blockFactor[c]);
    if (block >= 0) blockF = s.blockFactor[BlockClass(block)];
    for (int c = 0; c < kAlignClasses; ++c) alignF = std::min(alignF, s.alignFactor[c]);
    for (int c = 0; c < kCoreClasses; ++c) coreF = std::min(coreF, s.coreFactor[c]);
    if (cores >= 0) coreF = s.coreFactor[std::min<int64_t>(cores, kCoreClasses - 1)];
    const int b = static_cast<int>(std::min<int64_t>(std::max<int64_t>(bn, 0), kBufferClasses - 1));
    return blockF * s.bufferFactor[b] * alignF * coreF;
}

/** One exact-scheme configuration of the search space at n elements (space.score_space's row): the
 *  prediction and its bound carry the knob correction; where the time goes (core, bandwidth) does not. */
inline Prediction PredictConfig(int64_t n, int64_t block, int64_t bn, int64_t tile, int64_t coreNum,
                                const KernelModel& k, const SocModel& s, double hit, bool exact) {
    const Kinds kd = KindsOf(n, k.elemBytes, block, tile, coreNum);
    Prediction p = Evaluate(kd, tile / k.elemBytes, bn, k, s, exact, -1.0, hit);
    const double f = KnobFactor(s, k, block, bn, tile, kd.cores);
    if (f != 1.0) {
        p.us = p.us * f;
        p.lower = p.lower * f;
    }
    return p;
}

/** np.round(us, 9) as NumPy computes it: rint(us * 1e9) / 1e9 (us itself if that overflows): a tie's key. */
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

/** A line under every copy of one DMA direction: a copy of b > 0 bytes takes at least fixed + b * perByte. */
struct CopyLine {
    double fixed = 0.0, perByte = 0.0;
};

/**
 * The line of the curve's last slope under every measured point: CopyUs interpolates between points,
 * holds the first point's time below it and extrapolates past the last at that slope, so a line below
 * every point with a slope in [0, the last slope] stays below the curve. It bounds copies the bandwidth
 * share does not (a core with a large share is held by its DMA curve); 0 bytes cost 0 (no copy). Its
 * fixed cost is never negative: where the last slope's line would start below 0 (a curve that steepens),
 * the line through the origin under every point is taken instead, so a bound that counts copies only
 * rises with their number (what the re-fit's floors rely on).
 */
inline CopyLine CurveLine(const Curve& c) {
    const double slope = std::max(c.slope, 0.0);
    double fixed = INFINITY;
    for (int i = 0; i < c.points; ++i) fixed = std::min(fixed, c.us[i] - slope * c.bytes[i]);
    if (fixed >= 0.0) return CopyLine{fixed, slope};
    double through = slope;
    for (int i = 0; i < c.points; ++i) {
        if (c.bytes[i] > 0.0) through = std::min(through, std::max(c.us[i], 0.0) / c.bytes[i]);
    }
    return CopyLine{0.0, through};
}

/** The line under a misaligned copy: fixed + (t - fixed) / m for the aligned line's t, or that aligned
 *  line itself (a misaligned copy is never faster) where the other would start below 0. */
inline CopyLine MisalignedLine(const CopyLine& aligned, double fixed, double m) {
    const CopyLine mis{fixed + (aligned.fixed - fixed) / m, aligned.perByte / m};
    return mis.fixed >= 0.0 ? mis : aligned;
}

/** The vector time of a tile of x elements is at least fixed + x * perElem. */
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

/**
 * The lines under a core's copies and instructions when `cores` cores share the bandwidth: what every
 * (block, cores) pair of a re-fit with that core count shares, so a re-fit computes them once per core
 * count. Each copy costs at least the larger of two lines (CopyUs's fixed cost plus the bytes at the
 * core's bandwidth share; the curve's last-slope line, CurveLine), each tile's instructions at least
 * their start cycles plus the elements' repeats (VectorFloor). A misaligned copy's lines carry its
 * slowdown. Valid where a misaligned copy is never faster (0 < misaligned factor <= 1) and the curve's
 * fixed costs are not negative; `valid` is false otherwise (the bounds are then -INFINITY).
 */
struct CoreLines {
    bool valid = false;
    int64_t bn = 1;
    double vecFixed = 0.0, vecPerElem = 0.0;
    double base = 0.0;  // launch, core start-up and the row copy every core makes first
    // [misaligned][line]; per element, not per byte (perByte holds the per-element cost here)
    CopyLine in[2][2], out[2][2];

    CoreLines() = default;
    /** mte2Line, mte3Line: CurveLine of the SoC's curves (the same for every core count). */
    CoreLines(int64_t cores, int64_t bn_, const KernelModel& k, const SocModel& s, double agg, const VectorFloor& vec,
              const CopyLine& mte2Line, const CopyLine& mte3Line)
        : bn(bn_) {
        const double m = s.misalignedFactor;
        if (m > 1.0 || m <= 0.0 || s.mte2.fixed < 0.0 || s.mte3.fixed < 0.0 || cores <= 0) return;
        valid = true;
        vecFixed = vec.fixed;
        vecPerElem = vec.perElem;
        const double c = static_cast<double>(cores);
        const double perByte = 1.0 / (agg / c * 1e3);
        const double l2PerByte = 1.0 / (s.l2Gbps / c * 1e3);
        const double elem = static_cast<double>(k.elemBytes);
        const double dense = static_cast<double>(k.fullInputs - k.rowInputs - k.workspaceInputs);
        const double windows = static_cast<double>(k.workspaceInputs);  // always misaligned (a window at any phase)
        const double rows = static_cast<double>(k.rowInputs);  // a few values a tile: their fixed cost only
        const double outs = static_cast<double>(k.outputs);
        const double f2 = s.mte2.fixed, f3 = s.mte3.fixed;
        // a misaligned copy takes fixed + (t - fixed) / m for the t it would take aligned (CopyUs): its lines,
        // or the aligned line (never slower) where that one would start below 0
        const CopyLine inMis = MisalignedLine(mte2Line, f2, m), outMis = MisalignedLine(mte3Line, f3, m);
        for (int mis = 0; mis < 2; ++mis) {
            const double slow = mis ? 1.0 / m : 1.0;  // the dense streams and the output of a misaligned kind
            // the share's line: every copy its fixed cost, the bytes at the core's share (windows: the L2 share)
            in[mis][0] = {static_cast<double>(k.fullInputs) * f2,
                          dense * elem * perByte * slow + windows * elem * l2PerByte / m};
            out[mis][0] = {outs * f3, outs * elem * perByte * slow};
            // the curve's line for the element streams
            const CopyLine& dIn = mis ? inMis : mte2Line;
            const CopyLine& dOut = mis ? outMis : mte3Line;
            in[mis][1] = {dense * dIn.fixed + windows * inMis.fixed + rows * f2,
                          dense * elem * dIn.perByte + windows * elem * inMis.perByte};
            out[mis][1] = {outs * dOut.fixed, outs * elem * dOut.perByte};
        }
        base = s.launchUs + s.coreStartUs +
               static_cast<double>(k.workspaceInputs) * CopyUs(static_cast<double>(k.rowBytes), s.mte2, agg / c, true, 1.0);
    }

    /** count copies moving elems elements in all: at least the larger line's total. */
    static double Sum(const CopyLine (&lines)[2], double count, double elems) {
        return std::max(count * lines[0].fixed + elems * lines[0].perByte, count * lines[1].fixed + elems * lines[1].perByte);
    }

    /**
     * A core of e elements (its copies misaligned or not) with tiles of at most teMax elements, less `base`:
     * simulate.bounds_us's five chains with each stage at its floor and the tile count at its least. It
     * only rises as teMax falls (more tiles) and as e grows (more of everything).
     */
    double KindFloor(int64_t e, bool mis, int64_t teMax) const {
        const double first = in[0][0].fixed, last = vecFixed + out[0][0].fixed;  // the first CopyIn, the last Compute + CopyOut
        const double ee = static_cast<double>(e);
        const int64_t tiles = Ceil(e, teMax);
        const double t = static_cast<double>(tiles);
        const double hops = static_cast<double>((tiles - 1) / bn);
        const double spread = std::max(0.0, ee / static_cast<double>(bn) - static_cast<double>(teMax));
        return std::max(std::max(Sum(in[mis], t, ee) + last, first + t * vecFixed + ee * vecPerElem + out[0][0].fixed),
                        std::max(first + vecFixed + Sum(out[mis], t, ee),
                                 std::max(Sum(in[mis], hops, spread) + hops * vecFixed + spread * vecPerElem + first + last,
                                          first + Sum(out[mis], hops, spread) + hops * vecFixed + spread * vecPerElem + last)));
    }

    /** Any pair with this core count at tiles of at most teMax: its widest core holds at least ceil(n / cores). */
    double GroupUs(int64_t n, int64_t cores, int64_t teMax) const {
        if (!valid) return -INFINITY;
        const int64_t e = Ceil(n, cores);
        return base + std::min(KindFloor(e, false, teMax), KindFloor(e, true, teMax));
    }
};

/**
 * Lower bounds of exact tilings with one (block, core count) pair, whatever the tile, for the re-fit's
 * pruning: the pair's core kinds on its core count's lines (CoreLines). A core's pipeline is no shorter
 * than simulate.bounds_us's five chains: all CopyIns; all Computes; all CopyOuts; the CopyIn-Compute
 * cycle through the buffers; the Compute-CopyOut cycle. The kind's alignment does not depend on the
 * tile (tiles are whole 512-B blocks).
 */
class CoreBound {
public:
    CoreBound() = default;

    CoreBound(const Kinds& kd, const CoreLines& lines) : l_(&lines) {
        if (!lines.valid || kd.cores <= 0) return;
        bool widestAligned = false;
        for (int i = 0; i < 3; ++i) {
            if (kd.counts[i] <= 0 || kd.elems[i] <= 0) continue;
            elems_[kinds_] = kd.elems[i];
            mis_[kinds_++] = !kd.aligned[i];
            if (kd.elems[i] > widest_) widestAligned = false;
            widest_ = std::max(widest_, kd.elems[i]);
            if (kd.elems[i] == widest_ && kd.aligned[i]) widestAligned = true;
        }
        widestMis_ = !widestAligned;  // if two kinds are the widest, the aligned one's (cheaper) bound
    }

    /** Any tiling of this pair with tiles of at most teMax elements: it only rises as teMax falls (more
     *  tiles), so what it rules out at one tile it rules out at every smaller tile. */
    double Us(int64_t teMax) const {
        double core = -INFINITY;
        for (int i = 0; i < kinds_; ++i) core = std::max(core, l_->KindFloor(elems_[i], mis_[i], teMax));
        return l_->base + core;
    }

    /**
     * Any tiling of this pair whose widest core runs as many tiles as it does with tiles of te elements:
     * every tile size from *teLow (the smallest with that tile count) up to te (RangeUs over all of them).
     * Where a core runs few tiles this is far above Us(te), which must also hold for any number of tiles.
     */
    double IntervalUs(int64_t te, int64_t* teLow) const {
        *teLow = te;
        if (kinds_ == 0) return -INFINITY;
        *teLow = Ceil(widest_, Ceil(widest_, te));
        return RangeUs(te, *teLow);
    }

    /**
     * Any tiling of this pair with tiles of lo to te elements, lo at or above IntervalUs's teLow (the widest
     * core runs the same t tiles at every such size): its first t - 1 tiles hold at least lo elements each
     * and its last at least what t - 1 tiles of te leave, so each of the widest core's chains (and the
     * staircases that turn at its last full tile) is at least its value at those sizes. At lo == te it is
     * close to ConfigUs's bound of the widest core; the wider the range, the lower.
     */
    double RangeUs(int64_t te, int64_t lo) const {
        if (kinds_ == 0) return -INFINITY;
        const int64_t e = widest_;
        const int64_t t = Ceil(e, te);
        const double x = t > 1 ? static_cast<double>(lo) : static_cast<double>(e);  // the first tile, at least
        const double y = static_cast<double>(std::max<int64_t>(1, e - (t - 1) * te));  // the last tile, at least
        const double tt = static_cast<double>(t), ee = static_cast<double>(e);
        const double hops = static_cast<double>((t - 1) / l_->bn);
        const CopyLine(&in)[2] = l_->in[widestMis_];
        const CopyLine(&out)[2] = l_->out[widestMis_];
        const double ax = Sum(in, 1.0, x), bx = l_->vecFixed + x * l_->vecPerElem, cx = Sum(out, 1.0, x);
        const double ay = Sum(in, 1.0, y), by = l_->vecFixed + y * l_->vecPerElem, cy = Sum(out, 1.0, y);
        double chain = std::max(
            std::max(Sum(in, tt, ee) + by + cy, ax + tt * l_->vecFixed + ee * l_->vecPerElem + cy),
            std::max(ax + bx + Sum(out, tt, ee), std::max(hops * (ax + bx) + ay + by + cy, ax + hops * (bx + cx) + by + cy)));
        if (t > 1) chain = std::max(chain, Turns(tt - 1.0, Stage{ax, bx, cx}, Stage{ay, by, cy}));
        return l_->base + chain;
    }

    /** One configuration (tiles of te elements, kd's tiles and last tiles): simulate.bounds_us's chains with
     *  each stage at its floor. Below Evaluate's bound, and far cheaper to compute. */
    double ConfigUs(const Kinds& kd, int64_t te) const {
        double core = -INFINITY;
        const double x = static_cast<double>(te);
        const double fb = l_->vecFixed + x * l_->vecPerElem;
        for (int i = 0; i < 3; ++i) {
            if (kd.counts[i] <= 0 || kd.tiles[i] <= 0) continue;
            const CopyLine(&in)[2] = l_->in[!kd.aligned[i]];
            const CopyLine(&out)[2] = l_->out[!kd.aligned[i]];
            const double fa = Sum(in, 1.0, x), fc = Sum(out, 1.0, x);
            const double y = static_cast<double>(kd.tail[i]);
            const double ta = Sum(in, 1.0, y), tb = l_->vecFixed + y * l_->vecPerElem, tc = Sum(out, 1.0, y);
            const bool many = kd.tiles[i] > 1;
            const double nf = static_cast<double>(kd.tiles[i] - 1);
            const double a = many ? fa : 0.0, b = many ? fb : 0.0, c = many ? fc : 0.0;
            const double a1 = many ? fa : ta, b1 = many ? fb : tb;
            const double hops = static_cast<double>((kd.tiles[i] - 1) / l_->bn);
            const double chain = std::max(
                std::max(nf * a + ta + tb + tc, a1 + nf * b + tb + tc),
                std::max(a1 + b1 + nf * c + tc, std::max(hops * (a + b) + ta + tb + tc, a1 + hops * (b + c) + tb + tc)));
            core = std::max(core, std::max(chain, Turns(nf, Stage{a, b, c}, Stage{ta, tb, tc})));
        }
        return l_->base + core;
    }

private:
    static double Sum(const CopyLine (&lines)[2], double count, double elems) { return CoreLines::Sum(lines, count, elems); }

    const CoreLines* l_ = nullptr;
    int64_t elems_[3] = {0, 0, 0};
    bool mis_[3] = {false, false, false};  // the kind's copies start misaligned
    int64_t widest_ = 0;
    bool widestMis_ = false;
    int kinds_ = 0;  // none: the bound is -INFINITY
};

constexpr int64_t kMaxCores = 64;   // vector cores of a SoC the re-fit spreads over, at most
constexpr int kMaxBlocks = 16;      // block sizes one re-fit chooses among, at most
constexpr int64_t kMaxTiles = 1023; // tile choices one re-fit walks, at most (512 B .. 511.5 KiB)

/** What one (block, core count) pair of a re-fit keeps across tiles; a per-thread scratch, no allocation. */
struct RefitPair {
    int block;          // index into the block sizes
    int64_t cores;
    bool known;         // kinds, traffic and floors computed (at the pair's first visit)
    double trafficUs;   // launch + bytes over the bandwidth: the same at every tile (x factorFloor)
    double factorFloor; // the least knob correction of the pair's configurations (1 without one)
    Kinds kinds;        // at any tile (WithTile sets the tiles)
    int64_t widest;     // elements of the widest core: from that tile up, one tile per core
    int64_t asleepAbove;  // tile index: above it the pair's prediction is the one already evaluated
    CoreBound floor;
};

struct RefitScratch {
    RefitPair pairs[kMaxBlocks * kMaxCores];
    int16_t alive[kMaxBlocks * kMaxCores];  // the pairs still in the search, in visiting order
    CoreLines lines[kMaxCores + 1];         // per core count, computed at its first pair's first visit
    bool linesKnown[kMaxCores + 1];
};

/**
 * The fastest (block, tile, cores) of one BUFFER_NUM at n elements in the default (cold) L2 state, over tiles of
 * kTileStepBytes, 2 kTileStepBytes, ... up to tileTop, block sizes as given in descending order and 1 to
 * maxCores cores, with the space's tie-break (predictions rounded to 1e-9 us; then the larger tile, more
 * cores, the larger block): what score_space(...).best_index() picks over that slice, without scoring it.
 *
 * A bounded search in tie-break order: tiles from the largest down, and at each tile the (block, cores)
 * pairs with more cores first, then the larger block. A configuration then wins only with a smaller
 * rounded prediction, so it is skipped at the first of these bounds that says it cannot:
 *   1. the seed: the bucket's tuned (block, tile, cores) is simulated first; nothing slower can win;
 *   2. traffic: launch + bytes over the bandwidth, the same at every tile: the pair is dropped for good;
 *   3. the pair's floor (CoreBound::Us), which only rises as tiles shrink: dropped for good;
 *   4. asleep: once every core of a pair fits in one tile, smaller tiles give the same prediction down to
 *      its widest core's tile, and cannot win the tie: the pair is evaluated once and sleeps until then
 *      (or, with a knob correction, until the next tile whose alignment has a smaller factor);
 *   5. the configuration's floor (CoreBound::ConfigUs), then its chain bound (Evaluate without the
 *      schedule), and only then the simulation, unless the chain bound is the prediction.
 * With a knob correction (SocModel::blockFactor ...) every prediction carries its configuration's factor
 * and every bound the least factor of what it bounds (KnobFactorFloor).
 * The margins cover float rounding. None of the drops changes the pick: what they drop predicts at or
 * above the fastest already seen (it neither wins nor lowers that), or more than a tie's width above the
 * seed's (which beats it). tests/tiling_model/test_engine.py checks the pick against the specification.
 */
inline RefitChoice Refit(int64_t n, const int64_t* blocks, int nBlocks, int64_t bn, int64_t tileTop, int64_t maxCores,
                         const KernelModel& k, const SocModel& s, int64_t seedBlock, int64_t seedTile,
                         int64_t seedCores, RefitStats* stats = nullptr) {
    static thread_local RefitScratch w;
    RefitChoice best{-1, -1, -1, INFINITY};
    const int64_t tiles = std::min(tileTop / kTileStepBytes, kMaxTiles);
    if (n <= 0 || nBlocks <= 0 || nBlocks > kMaxBlocks || tiles < 1) return best;
    const int64_t elem = k.elemBytes;
    const double hit = DefaultHit(k, s, n);
    const double agg = Aggregate(s, hit);
    const VectorFloor vecFloor(k, s);
    const CopyLine mte2Line = CurveLine(s.mte2), mte3Line = CurveLine(s.mte3);
    std::fill(w.linesKnown, w.linesKnown + kMaxCores + 1, false);
    const double fixedBytes = Footprint(k, n) + static_cast<double>(k.scalarInputs * k.elemBytes);
    const bool corrected = k.corrected && s.blockFactor != nullptr;
    int64_t coresMax[kMaxBlocks];
    int64_t topCores = 0;
    for (int b = 0; b < nBlocks; ++b) {
        coresMax[b] = std::min(std::min(maxCores, std::max<int64_t>(Ceil(n * elem, blocks[b]), 1)), kMaxCores);
        topCores = std::max(topCores, coresMax[b]);
    }
    // The pairs in visiting order; until a pair's kinds are known, its bytes at the full bandwidth stand in
    // for its traffic (every core's row copy included, no misalignment).
    int nAlive = 0;
    for (int64_t c = topCores; c >= 1; --c) {
        const double floor = s.launchUs + (fixedBytes + static_cast<double>(c * (k.workspaceInputs * k.rowBytes))) / (agg * 1e3);
        for (int b = 0; b < nBlocks; ++b) {
            if (c > coresMax[b]) continue;
            RefitPair& p = w.pairs[nAlive];
            w.alive[nAlive] = static_cast<int16_t>(nAlive);
            ++nAlive;
            p.block = b;
            p.cores = c;
            p.known = false;
            p.factorFloor = KnobFactorFloor(s, k, blocks[b], bn, c);
            p.trafficUs = floor * p.factorFloor;
            p.asleepAbove = tiles + 1;
        }
    }
    double seedUs = INFINITY;  // 1. the seed
    for (int b = 0; b < nBlocks; ++b) {
        if (blocks[b] == seedBlock && 1 <= seedCores && seedCores <= coresMax[b] && seedTile >= kTileStepBytes &&
            seedTile % kTileStepBytes == 0 && seedTile <= tiles * kTileStepBytes) {
            seedUs = PredictConfig(n, seedBlock, bn, seedTile, seedCores, k, s, hit, true).us;
        }
    }
    const double seedTie = seedUs + 1.0 / kTieScale;  // more than a tie's width above the seed: the seed beats it
    double bestUs = INFINITY, bestKey = INFINITY;
    auto ruledOut = [&](double bound, double margin, double seedLimit) {
        return bound - margin >= bestUs || bound - margin > seedLimit;
    };
    for (int64_t ti = tiles; ti >= 1 && nAlive > 0;) {
        const int64_t tile = ti * kTileStepBytes;
        const int64_t te = tile / elem;
        const double fullVec = VectorUs(static_cast<double>(te), k, s);  // the same full tile on every pair
        int kept = 0;
        int64_t nextTi = 0;  // the next tile at which some pair is awake
        int64_t groupCores = -1;
        bool groupOut = false;
        for (int a = 0; a < nAlive; ++a) {
            RefitPair& p = w.pairs[w.alive[a]];
            if (p.cores != groupCores) {  // 2. every pair of this core count (they come together): one floor
                groupCores = p.cores;
                if (!w.linesKnown[groupCores]) {
                    w.lines[groupCores] = CoreLines(groupCores, bn, k, s, agg, vecFloor, mte2Line, mte3Line);
                    w.linesKnown[groupCores] = true;
                }
                const double group =
                    w.lines[groupCores].GroupUs(n, groupCores, te) * KnobFactorFloor(s, k, -1, bn, groupCores);
                groupOut = ruledOut(group, kPruneMarginUs + 1e-9 * std::fabs(group), seedTie);
            }
            if (groupOut) continue;  // dropped, asleep or not: the floor only rises as tiles shrink
            if (ti > p.asleepAbove) {  // 4. asleep: kept, in place
                w.alive[kept++] = w.alive[a];
                nextTi = std::max(nextTi, std::min(ti - 1, p.asleepAbove));
                continue;
            }
            if (ruledOut(p.trafficUs, 0.0, seedUs)) continue;  // 2. traffic
            if (!p.known) {
                p.known = true;
                p.kinds = KindsOf(n, elem, blocks[p.block], kTileStepBytes, p.cores);
                p.widest = 0;  // over the kinds that have cores: the others do not enter a prediction
                for (int i = 0; i < 3; ++i) {
                    if (p.kinds.counts[i] > 0) p.widest = std::max(p.widest, p.kinds.elems[i]);
                }
                p.trafficUs = (s.launchUs + TrafficUs(p.kinds, k, s, agg)) * p.factorFloor;
                p.floor = CoreBound(p.kinds, w.lines[p.cores]);  // p.kinds.cores == p.cores: cores <= blocks
                if (ruledOut(p.trafficUs, 0.0, seedUs)) continue;
            }
            if (stats) ++stats->visited;
            const double floor = p.floor.Us(te) * p.factorFloor;  // 3. the pair's floor
            if (ruledOut(floor, kPruneMarginUs + 1e-9 * std::fabs(floor), seedTie)) continue;
            int64_t teLow = te;  // 4. the tiles down to teLow give the widest core as many tiles as te does
            const double interval = p.floor.IntervalUs(te, &teLow) * p.factorFloor;
            const bool intervalOut = ruledOut(interval, kPruneMarginUs + 1e-9 * std::fabs(interval), seedTie);
            const double factor = KnobFactor(s, k, blocks[p.block], bn, tile, p.cores);
            if (intervalOut) {
                p.asleepAbove = (teLow * elem - 1) / kTileStepBytes;  // none of them can win: asleep until below
            } else if (te >= p.widest) {
                p.asleepAbove = Ceil(p.widest * elem, kTileStepBytes) - 1;
                if (corrected) {  // the same prediction down to there, but a cheaper alignment's factor may win
                    for (int64_t below = ti - 1; below > p.asleepAbove; --below) {
                        if (KnobFactor(s, k, blocks[p.block], bn, below * kTileStepBytes, p.cores) < factor) {
                            p.asleepAbove = below;
                            break;
                        }
                    }
                }
            }
            Kinds kd{};
            bool configOut = false;
            if (!intervalOut) {
                kd = WithTile(p.kinds, te);  // 5. the configuration: == KindsOf(n, elem, block, tile, cores)
                const double linear = p.floor.ConfigUs(kd, te) * factor;
                configOut = ruledOut(linear, kPruneMarginUs + 1e-9 * std::fabs(linear), seedTie);
                if (configOut && te < p.widest) {  // 6. and the tiles below it that cannot win either (galloping)
                    int64_t lowest = ti;
                    for (int64_t step = 1; ti - step >= 1; step *= 2) {
                        const int64_t lo = (ti - step) * kTileStepBytes / elem;
                        if (lo < teLow) break;
                        const double range = p.floor.RangeUs(te, lo) * p.factorFloor;
                        if (!ruledOut(range, kPruneMarginUs + 1e-9 * std::fabs(range), seedTie)) break;
                        lowest = ti - step;
                    }
                    if (lowest < ti) p.asleepAbove = lowest - 1;
                }
            }
            w.alive[kept++] = w.alive[a];
            nextTi = std::max(nextTi, std::min(ti - 1, p.asleepAbove));
            if (intervalOut || configOut) continue;
            double us = 0.0;
            if (te >= p.widest) {  // one tile per core: the prediction directly
                us = OneTileUs(kd, k, s, hit);
            } else {  // 7. the chain bound (Evaluate without the schedule), then the simulation unless it is exact
                const Prediction bound = Evaluate(kd, te, bn, k, s, false, fullVec, hit);
                if (stats) ++stats->bounded;
                const double lower = bound.lower * factor;
                if (ruledOut(lower, kPruneMarginUs + kPruneRelative * lower, seedUs)) continue;
                if (stats && !bound.certain) ++stats->simulated;
                us = bound.certain ? bound.lower : Evaluate(kd, te, bn, k, s, true, fullVec, hit).us;
            }
            if (factor != 1.0) us = us * factor;  // PredictConfig's corrected prediction
            const double key = TieKey(us);
            if (key < bestKey) {
                bestKey = key;
                best.blockBytes = blocks[p.block];
                best.tileBytes = tile;
                best.coreNum = p.cores;
            }
            bestUs = std::min(bestUs, us);
        }
        nAlive = kept;
        ti = nextTi;  // the tiles between predict what they predicted above them: nothing to visit
    }
    best.us = bestUs;
    return best;
}

}  // namespace cost
}  // namespace bce_grad

#endif  // BCE_GRAD_COST_MODEL_H
