/**
 * The cost model's engine: one tiling's prediction (Evaluate, PredictConfig), its chain bounds, the knob
 * correction and residual factors it carries, and the space's tie-break. The re-fit that searches with it
 * (floors over many configurations, the branch and bound) is bce_grad_refit.h. It is the only scalar
 * implementation of the model: the CANN TilingFunc compiles it through bce_grad_tuned_tiling.h, and Python
 * calls the same code through the tiling_model._engine binding (tiling_model/engine.py) for the service,
 * the tuner's seeding, the explorer and `predict`.
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

#include "bce_grad_core_split.h"
#include "bce_grad_residual.h"

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
    // The device's learned residual over the realised tiling (tiling_model.residual, bce_grad_residual.h):
    // residual::kWidth factors, one per level of each feature. nullptr: none (1 everywhere).
    const double* residualFactor = nullptr;
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

/** AscendC allows at most 8 queue buffers carrying sync events per TPosition on A2/310B (ascendc-api.md
 *  s2.5, "max buffer number in same queue position"). The queue limit exists here once: the host tiling's
 *  default BUFFER_NUM (bce_grad_tiling_core.h), the tuned knobs' check (bce_grad_tuned_tiling.h) and, through
 *  the binding, tiling_model.kernels and validate.py all ask these. */
constexpr int64_t kMaxBuffersPerPosition = 8;

/** VECIN queues of a kernel: one per full input, and one for a per-tile scalar queue (the seed's grad). */
inline int64_t VecinQueues(int64_t fullInputs, int64_t scalarQueueBytes) {
    return fullInputs + (scalarQueueBytes > 0 ? 1 : 0);
}

/** BUFFER_NUM buffers for every queue of the busier TPosition (VECIN, VECOUT) fit the limit. */
inline bool QueueLimitAllows(int64_t vecinQueues, int64_t vecoutQueues, int64_t bufferNum) {
    return std::max(vecinQueues, vecoutQueues) * bufferNum <= kMaxBuffersPerPosition;
}

/** The kernel with a rows operand of R elements per value (a per-call number, like n). */
inline KernelModel WithRowLen(KernelModel k, int64_t rowLen) {
    if (k.rowInputs > 0) k.rowLen = rowLen;
    return k;
}

constexpr double kDupCycles = 1.0;  // Duplicate, cycles per 256-B repeat (kernels.CYCLES_PER_REPEAT)

/** A tiling's three kinds of core (big, small, last: bce_grad_core_split.h RunsOf) as the model reads them:
 *  how many cores of each, their elements, tiles and last tile's elements (0 where no core runs), whether
 *  every copy of the kind starts on kGmAlignBytes, and the cores that run. */
struct Kinds {
    int64_t counts[3];
    int64_t elems[3];
    int64_t tiles[3];
    int64_t tail[3];
    bool aligned[3];
    int64_t cores;
};

/** The kinds of any scheme's tiling from its struct and block dim, as the kernel's Init reads the struct. */
inline Kinds KindsOfData(const BceGradTilingData& f, int64_t blockDim, int64_t elem) {
    Kinds k{};
    CoreRun runs[3];
    RunsOf(SplitOf(f, blockDim), runs);
    const int64_t tiles[3] = {f.finalBigTileNum, f.finalSmallTileNum, f.lastCoreTileNum};
    const int64_t tails[3] = {f.bigTailDataNum, f.smallTailDataNum, f.lastCoreTailDataNum};
    const bool strideOk = (f.tileDataNum * elem) % kGmAlignBytes == 0;
    for (int i = 0; i < 3; ++i) {
        const bool runs_ = runs[i].cores > 0;
        k.counts[i] = runs[i].cores;
        k.elems[i] = runs_ ? runs[i].count : 0;
        k.tiles[i] = runs_ ? tiles[i] : 0;
        k.tail[i] = runs_ ? tails[i] : 0;
        k.aligned[i] = !runs_ || (strideOk && RunStartsAligned(runs[i], elem, kGmAlignBytes));
    }
    k.cores = blockDim > 0 ? blockDim : 0;
    return k;
}

/** The kinds of the exact scheme's tiling of n elements with these knobs (what its struct says). */
inline Kinds KindsOf(int64_t n, int64_t elem, int64_t block, int64_t tile, int64_t coreNum) {
    BceGradTilingData f{};
    const int64_t blockDim = SplitFields(n, elem, block, tile, coreNum, &f);
    return KindsOfData(f, blockDim, elem);
}

/** KindsOf's widest kind that has cores (at any tile: tiles are whole kTileStepBytes), without the tiles: its
 *  elements, and whether it is aligned (if two kinds are the widest, whether either is). What the re-fit bounds a
 *  (block, cores) pair's core time by; tests/kernel/cpp/refit_exhaustive.cpp checks it against KindsOf. */
struct WidestKind {
    int64_t elems;
    bool aligned;
    bool allAligned;    // every kind that runs starts its copies aligned (the residual's core-boundary feature)
    int64_t structure;  // which kinds run: 2 if small cores do, + 1 if the last core does (the residual's)
};

inline WidestKind WidestOf(int64_t n, int64_t elem, int64_t block, int64_t coreNum) {
    static_assert(kTileStepBytes % kGmAlignBytes == 0, "every tile's stride is aligned");
    WidestKind w{0, false, true, 0};
    if (n <= 0) return w;
    CoreRun runs[3];
    RunsOf(SplitCores(n, block / elem, coreNum), runs);
    for (const CoreRun& r : runs) {
        if (r.cores <= 0) continue;
        const bool aligned = RunStartsAligned(r, elem, kGmAlignBytes);
        w.allAligned = w.allAligned && aligned;
        if (r.count <= 0) continue;
        if (r.count > w.elems) {
            w.elems = r.count;
            w.aligned = false;
        }
        if (r.count == w.elems && aligned) w.aligned = true;
    }
    w.structure = (runs[kSmallRun].cores > 0 ? 2 : 0) + (runs[kLastRun].cores > 0 ? 1 : 0);
    return w;
}

/** kd (computed for any tile) with the tiles and last-tile sizes of tiles of te elements. */
inline Kinds WithTile(Kinds kd, int64_t te) {
    for (int i = 0; i < 3; ++i) Tiles(kd.elems[i], te, &kd.tiles[i], &kd.tail[i]);
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
    Kind kind = Cold;  // default-constructed: kDefaultL2, simulate.DEFAULT_L2 (what bcetune tunes for)
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

/**
 * A core kind's chain bound (simulate._bounds): each path through its schedule where every stage waits for
 * the one before it, so each is a lower bound of the kind's time. nf full tiles of stage f (a1, b1: the first
 * tile's CopyIn and Compute, the last tile's when there is one tile), the last tile t, hops = nf / BUFFER_NUM
 * (the turns a buffer makes): all CopyIns, all Computes or all CopyOuts in a row; every hop's CopyIn and
 * Compute, or Compute and CopyOut; the turns at the last full tile (Turns).
 */
inline double ChainUs(double nf, double hops, const Stage& f, const Stage& t, double a1, double b1) {
    return std::max(
        std::max(std::max(nf * f.in + t.in + t.vec + t.out, a1 + nf * f.vec + t.vec + t.out),
                 std::max(a1 + b1 + nf * f.out + t.out,
                          std::max(hops * (f.in + f.vec) + t.in + t.vec + t.out, a1 + hops * (f.vec + f.out) + t.vec + t.out))),
        Turns(nf, f, t));
}

/** What each of a launch's active cores gets (at least one core): its share of the aggregate bandwidth agg
 *  and of the L2's, and the time of the last-dim rows' copy it makes at start-up at that share. */
struct CoreShare {
    double share;
    double l2Share;
    double rowUs;
};

inline CoreShare ShareOf(int64_t cores, const KernelModel& k, const SocModel& s, double agg) {
    const double active = static_cast<double>(std::max<int64_t>(cores, 1));
    const double share = agg / active;
    return {share, s.l2Gbps / active,
            static_cast<double>(k.workspaceInputs) * CopyUs(static_cast<double>(k.rowBytes), s.mte2, share, true, 1.0)};
}

/** One tiling (its core kinds, tiles of te elements, BUFFER_NUM bn) at L2 hit share hit: with exact, every
 *  core kind's pipeline is simulated (simulate.simulate); else only the bounds (simulate.bounds_us).
 *  fullVec: the full tile's vector time if the caller has it (< 0: computed here). */
inline Prediction Evaluate(const Kinds& kd, int64_t te, int64_t bn, const KernelModel& k, const SocModel& s,
                           bool exact, double fullVec, double hit) {
    const double agg = Aggregate(s, hit);
    const auto [share, l2Share, rowUs] = ShareOf(kd.cores, k, s, agg);
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
        lowerCore = std::max(lowerCore, ChainUs(nf, hops, f, t, a1, b1) + s.coreStartUs + rowUs);
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
    const auto [share, l2Share, rowUs] = ShareOf(kd.cores, k, s, agg);
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
    const CoreShare c = ShareOf(kd.cores, k, s, Aggregate(s, hit));
    const double share = c.share, l2Share = c.l2Share;
    *rowUs = c.rowUs;
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

/** The SoC's learned residual for an exact-scheme configuration whose kinds are kd (simulate.residual_factors):
 *  its levels' factors (bce_grad_residual.h), 1 without one or for a kernel it does not apply to. */
inline double ResidualFactor(const SocModel& s, const KernelModel& k, const Kinds& kd, int64_t block, int64_t bn,
                             int64_t tile) {
    if (!k.corrected || s.residualFactor == nullptr) return 1.0;
    int64_t levels[residual::kFeatures];
    residual::LevelsOf(kd, k.elemBytes, block, bn, tile, levels);
    return residual::FactorOf(s.residualFactor, levels);
}

/** What an exact-scheme configuration's prediction is multiplied by: its knob correction times its residual. */
inline double ConfigFactor(const SocModel& s, const KernelModel& k, const Kinds& kd, int64_t block, int64_t bn,
                           int64_t tile) {
    return KnobFactor(s, k, block, bn, tile, kd.cores) * ResidualFactor(s, k, kd, block, bn, tile);
}

/** One exact-scheme configuration of the search space at n elements (space.score_space's row): the
 *  prediction and its bound carry the knob correction and the residual (ConfigFactor); where the time goes
 *  (core, bandwidth) does not. */
inline Prediction PredictConfig(int64_t n, int64_t block, int64_t bn, int64_t tile, int64_t coreNum,
                                const KernelModel& k, const SocModel& s, double hit, bool exact) {
    const Kinds kd = KindsOf(n, k.elemBytes, block, tile, coreNum);
    Prediction p = Evaluate(kd, tile / k.elemBytes, bn, k, s, exact, -1.0, hit);
    const double f = ConfigFactor(s, k, kd, block, bn, tile);
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

/** The tie-break among configurations whose predictions round alike (TieKey), as the space, the re-fit and
 *  every caller of theirs break it: a larger tile first, then more cores, then a larger block. blockRank is
 *  smaller for a larger block: -block bytes, or the re-fit's index into its descending blocks. */
inline bool KnobsBefore(int64_t tile, int64_t cores, int64_t blockRank, int64_t otherTile, int64_t otherCores,
                        int64_t otherBlockRank) {
    if (tile != otherTile) return tile > otherTile;
    if (cores != otherCores) return cores > otherCores;
    return blockRank < otherBlockRank;
}

/** One configuration as the space orders it. */
struct ConfigKey {
    double key;  // TieKey of its prediction
    int64_t bufferNum, tile, cores, block;
};

/** The space's order (ScoredSpace.best_index, the re-fit across buffer counts): the smaller rounded
 *  prediction first; on a tie, double-or-more buffering before single, fewer buffers, then KnobsBefore. */
inline bool ConfigBefore(const ConfigKey& a, const ConfigKey& b) {
    if (a.key != b.key) return a.key < b.key;
    const bool aSingle = a.bufferNum < 2, bSingle = b.bufferNum < 2;
    if (aSingle != bSingle) return !aSingle;
    if (a.bufferNum != b.bufferNum) return a.bufferNum < b.bufferNum;
    return KnobsBefore(a.tile, a.cores, -a.block, b.tile, b.cores, -b.block);
}

}  // namespace cost
}  // namespace bce_grad

#endif  // BCE_GRAD_COST_MODEL_H
