/**
 * The re-fit: the fastest (block, tile, cores) of a tuned bucket's slice at an exact element count, and of
 * several BUFFER_NUMs' slices (RefitAcross), without scoring the space. Floors under a core's time over many
 * configurations at once (CopyLine, VectorFloor, CoreLines: the chains of the cost model with every stage at
 * its least) bound a best-first branch and bound (RefitSearch) that predicts only what may win
 * (bce_grad_cost_model.h's PredictConfig, with the knob correction and the residual's floors,
 * bce_grad_residual.h). The CANN TilingFunc runs it through bce_grad_tuned_tiling.h; Python through the
 * tiling_model._engine binding (the service's re-fit, pick.refit). Its pick is score_space(...).best_index()'s
 * over the same slice: tests/tiling_model/test_engine.py checks it against the specification's, and
 * tests/kernel/cpp/refit_exhaustive.cpp against every configuration predicted; refit_floors.cpp checks the
 * floors against the simulated pipeline.
 *
 * Pure C++17, no CANN headers, no heap allocation; compile as bce_grad_cost_model.h says (no -ffast-math,
 * -ffp-contract=off).
 */
#ifndef BCE_GRAD_REFIT_H
#define BCE_GRAD_REFIT_H

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>

#include "bce_grad_cost_model.h"
#include "bce_grad_residual.h"

namespace bce_grad {
namespace cost {

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

/** Which copy lines a floor takes: a core kind's copies aligned, misaligned, or either (the lesser of the two
 *  lines, term by term: under both, for a bound over pairs whose alignment is not known yet). */
enum class Lines { Aligned = 0, Misaligned = 1, Either = 2 };

/**
 * Floors of a core's time when `cores` cores share the bandwidth: what every (block, cores) pair of a
 * re-fit with that core count shares. Each copy costs at least the larger of two lines (CopyUs's fixed
 * cost plus the bytes at the core's bandwidth share; the curve's last-slope line, CurveLine), each tile's
 * instructions at least their start cycles plus the elements' repeats (VectorFloor). A misaligned copy's
 * lines carry its slowdown. Valid where a misaligned copy is never faster (0 < misaligned factor <= 1)
 * and the curves' fixed costs are not negative; `valid` is false otherwise (the floors are then -INFINITY).
 *
 * A core's pipeline is no shorter than simulate.bounds_us's chains: all CopyIns; all Computes; all
 * CopyOuts; the CopyIn-Compute cycle through the buffers; the Compute-CopyOut cycle; and the staircases
 * that turn at the last full tile (Turns). With every stage at its floor they give ConfigUs (one
 * configuration) and RangeUs (every tile size in a range: what lets the re-fit rule out many at once).
 */
struct CoreLines {
    bool valid = false;
    int64_t bn = 1;
    double vecFixed = 0.0, vecPerElem = 0.0;
    double base = 0.0;  // launch, core start-up and the row copy every core makes first
    // [Lines][line]; per element, not per byte (perByte holds the per-element cost here)
    CopyLine in[3][2], out[3][2];

    CoreLines() = default;
    CoreLines(int64_t cores, int64_t bn_, const KernelModel& k, const SocModel& s, double agg, const VectorFloor& vec,
              const CopyLine& mte2Line, const CopyLine& mte3Line) {
        Set(cores, bn_, k, s, agg, vec, mte2Line, mte3Line);
    }

    /** The lines of `cores` cores; mte2Line, mte3Line: CurveLine of the SoC's curves (the same for every core
     *  count). In place: the re-fit keeps one per core count in its scratch; the trades are made at first use. */
    void Set(int64_t cores, int64_t bn_, const KernelModel& k, const SocModel& s, double agg, const VectorFloor& vec,
             const CopyLine& mte2Line, const CopyLine& mte3Line) {
        bn = bn_;
        valid = false;
        for (bool& made : traded_) made = false;
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
        for (int l = 0; l < 2; ++l) {
            in[2][l] = {std::min(in[0][l].fixed, in[1][l].fixed), std::min(in[0][l].perByte, in[1][l].perByte)};
            out[2][l] = {std::min(out[0][l].fixed, out[1][l].fixed), std::min(out[0][l].perByte, out[1][l].perByte)};
        }
        base = s.launchUs + s.coreStartUs + ShareOf(cores, k, s, agg).rowUs;
    }

    /** count copies moving elems elements in all: at least the larger line's total. */
    static double Sum(const CopyLine (&lines)[2], double count, double elems) {
        return std::max(count * lines[0].fixed + elems * lines[0].perByte, count * lines[1].fixed + elems * lines[1].perByte);
    }

    /** One tile of x elements run alone, start to end: its three stages in a row (a core of one tile). */
    double SerialUs(double x, Lines which) const {
        const int w = static_cast<int>(which);
        return Sum(in[w], 1.0, x) + vecFixed + x * vecPerElem + Sum(out[w], 1.0, x);
    }

    /**
     * A core kind of e elements run in tiles of xlo to xhi elements (xlo >= 1), less `base`: the chains with
     * every stage at its floor, over every tile size in the range at once. With t = ceil(e / x) tiles, x is
     * at least xlo, the t - 1 full tiles hold F = e - y >= e - min(xhi, e - 1) elements, the last one
     * y >= e - (t - 1) xhi, t and the buffer hops floor((t - 1) / bn) are at least their values at xhi, and
     * every count of copies is at least its line's total (copies each cost at least their line). Without
     * exactWidth the last tile is taken at its least (1), and then every term only rises with e: the bound
     * for e holds for any kind at least as wide (a core count's, from its least widest core, ceil(n / cores)).
     * Over one tile count (what a narrow range has) it is close to ConfigUs's chains of the range's smallest tile.
     */
    double RangeUs(int64_t e, Lines which, int64_t xlo, int64_t xhi, bool exactWidth, double serial = -1.0) const {
        if (!valid) return -INFINITY;
        const int w = static_cast<int>(which);
        const double ee = static_cast<double>(e);
        const double one = xhi < e ? INFINITY : serial >= 0.0 ? serial : SerialUs(ee, which);  // one tile holds the kind
        const int64_t top = std::min(xhi, e - 1);  // the largest tile that leaves a last tile (t >= 2)
        if (top < xlo) return one;
        const int64_t t1 = std::max<int64_t>(CeilDiv(e, top), 2), t2 = CeilDiv(e, xlo);
        const double x = static_cast<double>(xlo), hi = static_cast<double>(top);
        const double nf = static_cast<double>(t1 - 1), tt = static_cast<double>(t1);
        // the full tiles: t - 1 of at least xlo, e - y in all, and (t - 1) / t of e (x >= e / t)
        const double f = std::max(std::max(ee - hi, nf * x), ee * nf / tt);
        const double y = exactWidth ? std::max(1.0, ee - static_cast<double>(t2 - 1) * hi) : 1.0;  // the last tile
        // the buffer cycles' tiles: h = floor((t - 1) / bn) full tiles and the last, which hold all but the t - 1 - h
        // full tiles the cycle skips: at least e - (1 - 1 / bn) (e - 1 + x), x <= xhi (not top: so it rises with e)
        const double bnd = static_cast<double>(bn), hops = static_cast<double>((t1 - 1) / bn);
        const double eh = std::max(hops * x + y, ee - (1.0 - 1.0 / bnd) * (ee - 1.0 + static_cast<double>(xhi)));
        const CopyLine(&li)[2] = in[w];
        const CopyLine(&lo)[2] = out[w];
        const double ax = Sum(li, 1.0, x), bx = vecFixed + x * vecPerElem, cx = Sum(lo, 1.0, x);
        const double ay = Sum(li, 1.0, y), by = vecFixed + y * vecPerElem, cy = Sum(lo, 1.0, y);
        const double fa = std::max(nf * ax, Sum(li, nf, f)), fb = nf * vecFixed + f * vecPerElem;
        const double fc = std::max(nf * cx, Sum(lo, nf, f));
        const double hb = (hops + 1.0) * vecFixed + eh * vecPerElem;  // the cycle's Computes, the last's included
        const double copies = std::max(std::max(fa + ay, Sum(li, tt, ee)) + by + cy,      // all CopyIns
                                       ax + bx + std::max(fc + cy, Sum(lo, tt, ee)));    // all CopyOuts
        const double computes = ax + std::max(fb + by, tt * vecFixed + ee * vecPerElem) + cy;
        const double cycles = std::max(std::max(hops * ax + ay, Sum(li, hops + 1.0, eh)) + hb + cy,  // CopyIn-Compute
                                       ax + hb + std::max(hops * cx + cy, Sum(lo, hops + 1.0, eh)));  // Compute-CopyOut
        const double turns = std::max(fa + bx + std::max(cx, by) + cy, ax + fb + cx + cy);
        return std::min(one, std::max(std::max(copies, computes), std::max(cycles, turns)));
    }

    /**
     * Every core kind of eMin to eMax elements run in tiles of lo to hi elements, less `base`: two chains with
     * the tile count and the last tile tied to the tile, where RangeUs takes each at its least on its own (the
     * smallest tile with the fewest tiles: a range that spans a trade between a tile's fixed costs and the last
     * tiles' drain is bounded far below its best). With t >= 2 tiles of x and a last tile of y = e - (t - 1) x,
     * each stage at least one line of its own (f + p x in, g + q x out, vf + vp x compute; of the CopyIns' two
     * lines, the one larger at the middle of the x a count spans, of the CopyOuts' the steeper: Trade):
     *   A: every CopyIn, then the last tile's Compute and CopyOut    t f + e p + vf + g + y (vp + q)
     *   B: the last full tile's turn (Turns: t - 1 CopyIns, its Compute and CopyOut, the last CopyOut)
     *                                                                (t - 1) (f + x p) + vf + x (vp + q) + 2 g + y q
     * For each of the first few tile counts both are lines in x (the least of the larger is at an end or where
     * they cross); past them, the larger is at least their mix whose weights cancel y, which with t >= e / x is
     * e f / x + b x + e p + c: its least over the range at once (the larger of the CopyIns' two lines). With one
     * buffer, the two cycles through it (every CopyIn and Compute, then the last CopyOut; the first CopyIn, then
     * every Compute and CopyOut) and the first turning at the last full tile (its CopyOut frees the buffer the
     * last Compute writes: PipelineUs) are lines in x too; past the counted tile counts, that first cycle's
     * CopyIns and Computes number one more than counted at least (without them a wide range's floor fell to its
     * A-B mix, 5% under a core count's best: tests/kernel/cpp/refit_floors.cpp checks every floor against the
     * pipeline). All rise with e at every x (so eMin's bound holds for all,
     * over every x any of them may take), and one tile (x >= e) is SerialUs (or the exact time given).
     */
    double TradeUs(int64_t eMin, int64_t eMax, Lines which, int64_t lo, int64_t hi, double serial = -1.0) const {
        if (!valid) return -INFINITY;
        double least = hi < eMin ? INFINITY : serial >= 0.0 ? serial : SerialUs(static_cast<double>(eMin), which);
        const int64_t top = std::min(hi, eMax - 1);  // the tiles that leave some kind a last tile
        if (top < lo) return least;
        const Trade* trades = TradeOf(static_cast<int>(which));
        const double e0 = static_cast<double>(eMin), e1 = static_cast<double>(eMax);
        const double xlo = static_cast<double>(lo), xhi = static_cast<double>(top);
        const int64_t first = std::max<int64_t>(CeilDiv(eMin, top), 2), last = CeilDiv(eMax, lo);
        const int64_t counted = std::min(last, first + kCountedTrades - 1);
        const double vf = vecFixed, vp = vecPerElem;
        // the tiles of t tiles, ceil(e / x) == t: e / t <= x <= (e - 1) / (t - 1), by reciprocals (one division
        // a count), widened by a rounding's width (a wider range only lowers its floor)
        constexpr double kLow = 1.0 - 1e-12, kHigh = 1.0 + 1e-12;
        double invBefore = 1.0 / static_cast<double>(first - 1);  // 1 / (t - 1)
        for (int64_t t = first; t <= counted; ++t) {
            const double tt = static_cast<double>(t), nf = tt - 1.0, inv = 1.0 / tt;
            const double xa = std::max(xlo, e0 * inv * kLow), xb = std::min(xhi, (e1 - 1.0) * invBefore * kHigh);
            invBefore = inv;
            if (xa > xb) continue;
            // the CopyIns' line that is the larger at the middle of the range (either is under every CopyIn)
            const double xm = 0.5 * (xa + xb);
            const Trade& tr = trades[trades[1].f + trades[1].p * xm > trades[0].f + trades[0].p * xm ? 1 : 0];
            const double f = tr.f, p = tr.p, g = tr.g, q = tr.q;
            // Evaluate's chains, each stage at its line and y = e - nf x put in, c0 + c1 x each: every CopyIn, then
            // the last tile's Compute and CopyOut (falling in x); the last full tile's turn (Turns: rising)
            double v = LeastOfTwo(tt * f + e0 * p + vf + g + e0 * (vp + q), -nf * (vp + q),
                                  nf * f + vf + 2.0 * g + e0 * q, nf * (p - q) + vp + q, xa, xb);
            if (bn == 1) {  // one buffer: the CopyIn-Compute cycle (falling) and the Compute-CopyOut cycle (rising);
                            // and that cycle turning at the last full tile (its CopyOut frees the buffer the last
                            // Compute writes: PipelineUs), rising
                const double cycle0 = tt * (f + vf) + g + e0 * (p + vp + q), cycle1 = -nf * q;
                v = std::max(v, LeastOfTwo(cycle0, cycle1, f + tt * (vf + g) + e0 * (vp + q), p, xa, xb));
                v = std::max(v, LeastOfTwo(cycle0, cycle1, nf * f + tt * vf + 2.0 * g + e0 * (vp + q), nf * (p - q) + q, xa, xb));
            }
            least = std::min(least, v);
        }
        if (counted < last) {  // more tiles than `counted`: x <= (e - 1) / counted
            const double xb = std::min(xhi, (e1 - 1.0) * invBefore * kHigh), root = std::sqrt(e0);
            double v = -INFINITY;
            for (int l = 0; l < 2; ++l) {
                const Trade& tr = trades[l];
                const double x = std::min(std::max(root * tr.root, xlo), xb);
                v = std::max(v, e0 * tr.f / x + tr.mixPerElem * x + e0 * tr.p + tr.mixFixed);
                if (bn == 1) {  // the CopyIn-Compute cycle: more than `counted` CopyIns and Computes, a last CopyOut
                    const double more = static_cast<double>(counted + 1);
                    v = std::max(v, more * (tr.f + vf) + e0 * (tr.p + vp) + tr.g + tr.q);
                }
            }
            least = std::min(least, v);
        }
        return least;
    }

    /** min over x in [xa, xb] of the larger of two lines a0 + a1 x and b0 + b1 x: at an end or where they cross. */
    static double LeastOfTwo(double a0, double a1, double b0, double b1, double xa, double xb) {
        double v = std::min(std::max(a0 + a1 * xa, b0 + b1 * xa), std::max(a0 + a1 * xb, b0 + b1 * xb));
        if (a1 != b1) {
            const double x = (b0 - a0) / (a1 - b1);
            if (xa < x && x < xb) v = std::min(v, a0 + a1 * x);
        }
        return v;
    }

    /** One configuration (tiles of te elements, kd's tiles and last tiles), every kind: the chains with each
     *  stage at its floor. Below Evaluate's bound, and far cheaper to compute. */
    double ConfigUs(const Kinds& kd, int64_t te) const {
        if (!valid) return -INFINITY;
        double core = -INFINITY;
        const double x = static_cast<double>(te);
        const double fb = vecFixed + x * vecPerElem;
        for (int i = 0; i < 3; ++i) {
            if (kd.counts[i] <= 0 || kd.tiles[i] <= 0) continue;
            const CopyLine(&li)[2] = in[!kd.aligned[i]];
            const CopyLine(&lo)[2] = out[!kd.aligned[i]];
            const double fa = Sum(li, 1.0, x), fc = Sum(lo, 1.0, x);
            const double y = static_cast<double>(kd.tail[i]);
            const double ta = Sum(li, 1.0, y), tb = vecFixed + y * vecPerElem, tc = Sum(lo, 1.0, y);
            const bool many = kd.tiles[i] > 1;
            const double nf = static_cast<double>(kd.tiles[i] - 1);
            const double a = many ? fa : 0.0, b = many ? fb : 0.0, c = many ? fc : 0.0;
            const double a1 = many ? fa : ta, b1 = many ? fb : tb;
            const double hops = static_cast<double>((kd.tiles[i] - 1) / bn);
            core = std::max(core, ChainUs(nf, hops, Stage{a, b, c}, Stage{ta, tb, tc}, a1, b1));
        }
        return base + core;
    }

private:
    /** TradeUs's lines (one of the CopyIns' two, the CopyOuts' steeper) and its mix of A and B past the counted
     *  tiles: lam A + (1 - lam) B with lam = (p - q) / (vp + p) (y's weight 0; clamped to [0, 1], y then at its
     *  worst end) is e f / x + mixPerElem x + e p + mixFixed. */
    struct Trade {
        double f, p, g, q;
        double mixPerElem, mixFixed;
        double root;  // sqrt(f / mixPerElem): where e f / x + mixPerElem x is least, over sqrt(e)
    };
    static constexpr int64_t kCountedTrades = 4;  // tile counts TradeUs bounds one by one
    mutable Trade trades_[3][2];  // per Lines: per line of the CopyIns, with the CopyOuts' steeper line
    mutable bool traded_[3] = {false, false, false};

    const Trade* TradeOf(int w) const {
        if (!traded_[w]) {
            traded_[w] = true;
            const CopyLine& lo = out[w][out[w][1].perByte > out[w][0].perByte ? 1 : 0];
            for (int l = 0; l < 2; ++l) MakeTrade(trades_[w][l], in[w][l], lo);
        }
        return trades_[w];
    }

    void MakeTrade(Trade& t, const CopyLine& li, const CopyLine& lo) const {
        t.f = li.fixed;
        t.p = li.perByte;
        t.g = lo.fixed;
        t.q = lo.perByte;
        const double vp = vecPerElem;
        const double lam = vp + t.p > 0.0 ? std::min(std::max((t.p - t.q) / (vp + t.p), 0.0), 1.0) : 0.0;
        const double perY = lam * (vp + t.q) + (1.0 - lam) * (t.q - t.p);  // y's weight left (0 unless clamped)
        t.mixPerElem = (1.0 - lam) * (vp + t.q) + std::min(perY, 0.0);          // at y = x if it is < 0
        t.mixFixed = vecFixed + t.g + (1.0 - lam) * (t.g - t.f) + std::max(perY, 0.0);  // else at y = 1
        t.root = t.mixPerElem > 0.0 ? std::sqrt(t.f / t.mixPerElem) : INFINITY;
    }
};

/** What a re-fit did (for benchmarks and for tuning its bounds). */
struct RefitStats {
    int64_t ranges = 0;     // ranges of configurations bounded (a core count's, or one pair's, tile range)
    int64_t pairs = 0;      // (block, cores) pairs whose core kinds were computed
    int64_t configs = 0;    // single configurations looked at (their own floor computed)
    int64_t bounded = 0;    // of those, the ones whose chain bound was computed
    int64_t simulated = 0;  // of those, the ones simulated
    int64_t peakQueue = 0;  // the most ranges waiting at once
};

struct RefitChoice {
    int64_t blockBytes;  // -1: no tile fits (or, under a bound, none ties it)
    int64_t tileBytes;
    int64_t coreNum;
    double us;            // the least prediction seen (the bound, if none was less)
    double key = INFINITY;  // TieKey of the pick's own prediction
};

constexpr int64_t kMaxCores = 64;    // vector cores of a SoC the re-fit spreads over, at most
constexpr int kMaxBlocks = 16;       // block sizes one re-fit chooses among, at most
constexpr int64_t kBufferChoices[] = {1, 2, 3, 4};  // BUFFER_NUMs of the search space (space.BUFFER_CHOICES)
constexpr int64_t kMaxTiles = 1023;  // tile choices one re-fit walks, at most (512 B .. 511.5 KiB)
constexpr int kMaxRanges = 4096;     // ranges waiting at once; past it a range is searched tile by tile at once

/** Tile indices tiLo..tiHi (tile = ti * kTileStepBytes) of every block of a core count (block -1) or of the
 *  pairs of one of its widths (block <= -2), and a floor under every prediction in it (float rounding already
 *  taken off). */
struct RefitRange {
    double floor;
    double engine;  // the floor but for the residual's factor (floor = engine * that factor's floor)
    int32_t tiLo, tiHi;
    int16_t cores;
    int16_t block;  // -1: every block of the core count; -2 - i: the pairs of its widths[i]
    bool exact;     // the residual's floor taken tile by tile (residual::Floors::Exact)
};

/** A (block, cores) pair's core kinds and what bounds its configurations, computed at its first opening. */
struct RefitPair {
    uint32_t epoch;      // known in the search of this RefitScratch::epoch (PairOf computes it at its first use)
    Kinds kinds;         // at any tile (WithTile sets the tiles)
    int64_t widest;      // elements of the widest core kind that runs
    double trafficUs;    // launch + bytes over the bandwidth with the least correction: under every tile's
    double blockFactor;  // its block size's part of the knob correction (1 without one)
    double residualBlock;  // and of the residual (1 without one)
};

/** The widest core of one or more (block, cores) pairs of one core count, and its copies' lines: what bounds
 *  their configurations' core time (PairOf). */
struct RefitWidth {
    int64_t elems;
    Lines lines;
    double serialUs;  // that core run as one tile: its stages in a row, exactly (Evaluate's, less the start-up);
                      // < 0 until a range with a tile that large needs it (SerialOf)
    double residualPair;  // the least residual factor of its pairs' blocks, core boundaries and structure
                          // (residual::Floors::PairFactor; 1 without a residual)
};

/** Each (block, cores) pair's widest core at one size (WidestOf): the same at every buffer count, so the slices
 *  of one RefitAcross (each a RefitSearch on the same scratch) compute it once. Valid for the size, element
 *  bytes and blocks it was made for (Reset says whether they changed); an entry is known in this epoch only. */
struct WidestMemo {
    WidestKind kinds[kMaxBlocks][kMaxCores + 1];
    uint32_t epochOf[kMaxBlocks][kMaxCores + 1] = {};
    uint32_t epoch = 0;  // 0 is never current: a fresh memo knows nothing
    int64_t n = -1, elem = -1;
    int count = -1;
    int64_t blocks[kMaxBlocks] = {};

    /** Forget every entry unless n, elem and blocks[0..count) are what it holds. */
    void Reset(int64_t n_, int64_t elem_, const int64_t* blocks_, int count_) {
        if (epoch != 0 && n == n_ && elem == elem_ && count == count_ &&
            std::equal(blocks_, blocks_ + count_, blocks)) {
            return;
        }
        n = n_;
        elem = elem_;
        count = count_;
        std::copy(blocks_, blocks_ + count_, blocks);
        if (++epoch == 0) {  // wrapped: no entry may look current
            for (auto& row : epochOf) std::fill(std::begin(row), std::end(row), 0u);
            epoch = 1;
        }
    }

    /** WidestOf(n, elem, blocks[b], c), computed at its first use in this epoch. */
    const WidestKind& Of(int b, int64_t c) {
        if (epochOf[b][c] != epoch) {
            kinds[b][c] = WidestOf(n, elem, blocks[b], c);
            epochOf[b][c] = epoch;
        }
        return kinds[b][c];
    }
};

/** What a re-fit works in: per thread, reused, no allocation (a new search's epoch marks every pair and every core
 *  count's widths unknown). */
struct RefitScratch {
    WidestMemo widest;  // kept across calls at one size (RefitAcross's slices)
    uint32_t epoch = 0;  // the current search's (0 is never one: a fresh scratch knows no pair)
    // Calls (RefitOn): the current one (0: a search made outside RefitOn, which shares nothing), how many so far,
    // and the call whose lines `lines` holds. CoreLines do not depend on the buffer count, so the slices of one
    // RefitAcross (one size, kernel, SoC and core cap: the same core counts) make them once.
    uint64_t call = 0, calls = 0, linesCall = 0;
    CoreLines lines[kMaxCores + 1];
    double groupFactor[kMaxCores + 1];
    RefitPair pairs[kMaxBlocks][kMaxCores + 1] = {};
    RefitWidth widths[kMaxCores + 1][kMaxBlocks];  // per core count: its pairs' widest cores, distinct
    int widthCount[kMaxCores + 1];                 // how many
    uint32_t widthsEpoch[kMaxCores + 1] = {};      // the search that made them
    int8_t widthOf[kMaxBlocks][kMaxCores + 1];     // a pair's index in its core count's widths
    double pairResidual[kMaxBlocks][kMaxCores + 1];  // a pair's residual::Floors::PairFactor (with widthOf)
    RefitRange queue[kMaxRanges];
};

/** The core counts the search space holds for a block size at n elements: 1 up to the SoC's cores, the
 *  blocks there are (more cores than blocks tile as the block count does) and kMaxCores. */
inline int64_t SpaceCores(int64_t n, int64_t elemBytes, int64_t blockBytes, int64_t maxCores) {
    return std::min(std::min(maxCores, std::max<int64_t>(CeilDiv(n * elemBytes, blockBytes), 1)), kMaxCores);
}

/**
 * The fastest (block, tile, cores) of one BUFFER_NUM at n elements in the default (cold) L2 state, over tiles
 * of kTileStepBytes, 2 kTileStepBytes, ... up to tiles * kTileStepBytes, the given block sizes (in descending
 * order) and 1 to maxCores cores, with the space's tie-break (predictions rounded to 1e-9 us; then the larger
 * tile, more cores, the larger block): what score_space(...).best_index() picks over that slice, without
 * scoring it.
 *
 * A best-first branch and bound. A range (RefitRange) is a set of configurations with a floor under every
 * prediction in it: a core count's every tile and block, or the tiles lo..hi of the pairs of a core count whose
 * widest core is the same (a width: WidestOf, with its copies' alignment).
 * Ranges wait in a queue, the lowest floor first (then the tie-break's order); the one taken is
 *   1. dropped if its floor says nothing in it can be picked (CanWin): a larger rounded prediction than the
 *      best seen, or at best a tie lost on the knobs; once the lowest floor is past the best, the search ends;
 *   2. a core count's range (floor: CoreLines::RangeUs and TradeUs of its least widest core, ceil(n / cores),
 *      up to the widest any block gives): opened into one range per width;
 *   3. a width's range (floor: RangeUs and TradeUs of that core, its one-tile time exact): split in two (by tile
 *      count at the geometric middle, then by tile) while that core runs more than one tile, else opened into
 *      its pairs (each pair's kinds and traffic computed at its first opening), each pair that may win by its
 *      traffic is predicted at once (4. or 5.). One that can at best tie tries its largest tile first: a tie
 *      there wins over the rest of the range;
 *   4. a pair's tiles that hold every core in one tile predict alike (the largest wins the tie): one candidate;
 *   5. one tile of a pair: its floor (CoreLines::ConfigUs), then its chain bound (Evaluate without the
 *      schedule), then the simulation, unless the chain bound is the prediction. (Queued as a range of its
 *      own, a pair's tile cost its range's floor and a turn of the queue: measured slower.)
 * Every floor carries the least knob correction of what it bounds (KnobFactorFloor) and the least residual
 * (queued with residual::Floors::Loose; a width, when it is the queue's first, takes Floors::Exact, tile by
 * tile, and goes back in the queue if that raised its floor), every prediction its own (ConfigFactor). The
 * seed (the bucket's tuned configuration) is predicted first: the best seen from the start. None of the drops
 * changes the pick: what a range holds predicts at or above its floor.
 * tests/tiling_model/test_engine.py checks the pick against the specification's, and
 * tests/kernel/cpp/refit_exhaustive.cpp against every configuration predicted.
 */
class RefitSearch {
public:
    /** queueLimit: ranges waiting at most (up to kMaxRanges; a smaller one only exercises the fallback). */
    RefitSearch(RefitScratch& w, int64_t n, const int64_t* blocks, int nBlocks, int64_t bn, int64_t tiles,
                int64_t maxCores, const KernelModel& k, const SocModel& s, RefitStats* stats,
                int queueLimit = kMaxRanges)
        : w_(w), n_(n), blocks_(blocks), nBlocks_(nBlocks), bn_(bn), tiles_(tiles), k_(k), s_(s), stats_(stats),
          queueLimit_(std::min(std::max(queueLimit, 1), kMaxRanges)),
          hit_(DefaultHit(k, s, n)), agg_(Aggregate(s, hit_)), corrected_(k.corrected && s.blockFactor != nullptr),
          residual_(k.corrected && s.residualFactor != nullptr), stepElems_(kTileStepBytes / k.elemBytes) {
        const VectorFloor vec(k, s);
        const CopyLine mte2Line = CurveLine(s.mte2), mte3Line = CurveLine(s.mte3);
        curvesRise_ = Rises(s.mte2) && Rises(s.mte3) && s.misalignedFactor > 0.0;
        int64_t blockClasses[kMaxBlocks];
        for (int b = 0; b < nBlocks; ++b) {
            coresMax_[b] = SpaceCores(n, k.elemBytes, blocks[b], maxCores);
            topCores_ = std::max(topCores_, coresMax_[b]);
            blockClasses[b] = ResidualBlockClass(blocks[b]);
        }
        if (residual_) floors_.Set(s.residualFactor, bn, blockClasses, nBlocks);
        if (++w.epoch == 0) {  // wrapped: no pair or widths may look made
            for (auto& row : w.pairs) {
                for (RefitPair& p : row) p.epoch = 0;
            }
            std::fill(std::begin(w.widthsEpoch), std::end(w.widthsEpoch), 0u);
            w.epoch = 1;
        }
        // per core count c, the first block (blocks descend: the largest) and the least residual block factor of
        // the blocks that run c cores (coresMax_[b] >= c): from each count's own, the counts above it folded in
        int firstBlock[kMaxCores + 1];
        std::fill(firstBlock, firstBlock + topCores_ + 1, nBlocks);
        std::fill(coresBlock_, coresBlock_ + topCores_ + 1, residual_ ? INFINITY : 1.0);
        for (int b = nBlocks - 1; b >= 0; --b) {
            firstBlock[coresMax_[b]] = b;
            if (residual_) coresBlock_[coresMax_[b]] = std::min(coresBlock_[coresMax_[b]], ResidualBlock(b));
        }
        for (int64_t c = topCores_ - 1; c >= 1; --c) {
            firstBlock[c] = std::min(firstBlock[c], firstBlock[c + 1]);
            coresBlock_[c] = std::min(coresBlock_[c], coresBlock_[c + 1]);
        }
        const bool linesHeld = w.call != 0 && w.linesCall == w.call;
        w.linesCall = w.call;
        for (int64_t c = 1; c <= topCores_; ++c) {
            if (linesHeld) {
                w.lines[c].bn = bn;
            } else {
                w.lines[c].Set(c, bn, k, s, agg_, vec, mte2Line, mte3Line);
            }
            w.groupFactor[c] = KnobFactorFloor(s, k, -1, bn, c);
            // the widest core any block gives c cores: (every + 1) blocks at most, of the largest block that runs c
            const int64_t blockElems = blocks[firstBlock[c]] / k.elemBytes;
            widestTop_[c] = CeilDiv(n + blockElems - 1, c) + blockElems;
        }
        w.widest.Reset(n, k.elemBytes, blocks, nBlocks);
    }

    /** A prediction from outside the slice (another buffer count's best): nothing that cannot tie it is searched
     *  for, and the search picks nothing (block -1) where nothing of the slice ties or beats it. Its rounded key
     *  is the best's until a configuration of the slice ties or beats it: one predicted above it (a pair's one
     *  tile, priced whole) is never picked, and never hides a tie of the bound that comes later in the tie-break
     *  (it once did: another buffer count's tie was lost, refit_exhaustive's bounded check). */
    void Bound(double us) {
        bestUs_ = std::min(bestUs_, us);
        if (best_.tile < 0) best_.key = std::min(best_.key, TieKey(us));
    }

    /** The seed configuration (any of the slice, else ignored), predicted: the best seen before the search. */
    void Seed(int64_t block, int64_t tile, int64_t cores) {
        for (int b = 0; b < nBlocks_; ++b) {
            if (blocks_[b] == block && 1 <= cores && cores <= coresMax_[b] && tile >= kTileStepBytes &&
                tile % kTileStepBytes == 0 && tile <= tiles_ * kTileStepBytes) {
                Consider(PredictConfig(n_, block, bn_, tile, cores, k_, s_, hit_, true).us, tile, cores, b);
            }
        }
    }

    RefitChoice Run() {
        for (int64_t c = topCores_; c >= 1; --c) Push(CoresRange(c));
        while (queued_ > 0) {
            RefitRange r = Pop();
            if (!CanWin(r)) {  // 1.
                if (r.floor > bestUs_ + kTieWidth) break;  // and so is everything after it in the queue
                continue;
            }
            if (residual_ && r.block != kEveryBlock && !r.exact) {
                // a width about to be opened: its residual's floor tile by tile, back in the queue if that raised it
                const RefitWidth& wd = w_.widths[r.cores][WidthOf(r)];
                const double floor =
                    r.engine * floors_.Exact(residual::RangeKnown{r.cores, r.tiLo, r.tiHi, wd.elems, stepElems_, 0.0, wd.residualPair});
                r.exact = true;
                if (floor > r.floor) {
                    r.floor = floor;
                    Push(r);
                    continue;
                }
            }
            if (r.block == kEveryBlock) {
                OpenCores(r);
            } else {
                OpenWidth(r);
            }
        }
        return RefitChoice{best_.block, best_.tile, best_.cores, bestUs_, best_.key};
    }

private:
    /** Past the least prediction seen by more than this, a prediction rounds to a larger key (two tie widths:
     *  the rounding of the product by 1e9 cannot close it). */
    static constexpr double kTieWidth = 2.0 / kTieScale;
    /** A range's block for every block of its core count (<= -2: the blocks of one widest core,
     *  widths[cores][-2 - block]). */
    static constexpr int32_t kEveryBlock = -1;
    static int32_t WidthBlock(int i) { return -2 - i; }                  // widths[cores][i]'s range's block
    static int WidthOf(const RefitRange& r) { return -2 - r.block; }      // and back: a width range's index
    static constexpr int64_t kTradeTiles = 32;  // TradeUs for ranges whose core runs at most this many tiles (Traded;
                                                // measured: 12 -> 16 -> 24..64 took the re-fit p99 19.5 -> 18.5 -> 18.4 us)

    struct Best {
        double key = INFINITY;  // TieKey of its prediction
        int64_t tile = -1, cores = -1, block = -1;
        int blockIndex = kMaxBlocks;
    };

    /** A curve whose times never fall with the bytes (nor past its last point): CopyUs then rises with them. */
    static bool Rises(const Curve& c) {
        for (int i = 0; i + 1 < c.points; ++i) {
            if (c.bytes[i + 1] <= c.bytes[i] || c.us[i + 1] < c.us[i]) return false;
        }
        return c.slope >= 0.0;
    }

    /** A floor with float rounding taken off (the floors' arithmetic is not the prediction's). */
    static double Floor(double bound) { return bound - (kPruneMarginUs + 1e-9 * std::fabs(bound)); }

    /** (tile, cores, block index) comes before the best in the tie-break (KnobsBefore; an index below 0 stands
     *  for a range's blocks, at best the first). */
    bool Before(int64_t tile, int64_t cores, int blockIndex) const {
        return KnobsBefore(tile, cores, blockIndex, best_.tile, best_.cores, best_.blockIndex);
    }

    /** Whether a configuration predicting at least `floor` and tied at best at (tile, cores, block) may be picked. */
    bool CanWin(double floor, int64_t tile, int64_t cores, int blockIndex) const {
        if (floor > bestUs_ + kTieWidth) return false;  // rounds to a larger key
        return floor < bestUs_ || Before(tile, cores, blockIndex);  // else at best a tie: won on the knobs
    }

    bool CanWin(const RefitRange& r) const { return CanWin(r.floor, r.tiHi * kTileStepBytes, r.cores, r.block); }

    /** A configuration's prediction: the best if its rounded key is smaller, or equal and it comes first. */
    void Consider(double us, int64_t tile, int64_t cores, int blockIndex) {
        const double key = TieKey(us);
        if (key < best_.key || (key == best_.key && Before(tile, cores, blockIndex))) {
            best_ = Best{key, tile, cores, blocks_[blockIndex], blockIndex};
        }
        bestUs_ = std::min(bestUs_, us);
    }

    /** What every configuration of c cores moves: the footprint and every core's row copy, at best over the full
     *  bandwidth (TrafficOf's arithmetic with nothing misaligned: at or under every pair's traffic, to the bit). */
    double CoresTrafficUs(int64_t c) const {
        // a per-tile scalar queue moves its bytes once a tile: at least once a core
        const double scalarBytes = k_.scalarQueueBytes > 0 ? static_cast<double>(c * k_.scalarQueueBytes)
                                                           : static_cast<double>(k_.scalarInputs * k_.elemBytes);
        const double fixedBytes = Footprint(k_, n_) + scalarBytes;
        return s_.launchUs + (fixedBytes + static_cast<double>(c * (k_.workspaceInputs * k_.rowBytes))) / (agg_ * 1e3);
    }

    /** A range of c cores' floor from its widest core's (less `base`) but for the residual: the larger of
     *  their traffic and that core's floor (float rounding taken off), with the least knob correction of the
     *  core count (the range's floor is this times the least residual of the range: LooseResidual, Floors::Exact). */
    double EngineFloor(int64_t c, double core) const {
        return std::max(CoresTrafficUs(c), Floor(w_.lines[c].base + core)) * w_.groupFactor[c];
    }

    /** A range of tiles tiLo..tiHi of c cores whose floor but for the residual is `engine`. */
    static RefitRange RangeOf(double engine, double residual, int64_t tiLo, int64_t tiHi, int64_t c, int block) {
        return RefitRange{engine * residual, engine, static_cast<int32_t>(tiLo), static_cast<int32_t>(tiHi),
                          static_cast<int16_t>(c), static_cast<int16_t>(block), false};
    }

    /** Under the residual of every configuration of c cores (given their blocks' least factor, or their pairs'
     *  least PairFactor, where known): residual::Floors::Loose, 1 without one. */
    double LooseResidual(int64_t c, double blockFactor, double pairFactor) const {
        static_assert(kTileStepBytes == residual::kPageStepBytes, "the residual's page steps are the re-fit's tiles");
        return residual_ ? floors_.Loose(residual::RangeKnown{c, 0, 0, 0, stepElems_, blockFactor, pairFactor}) : 1.0;
    }

    static int64_t ResidualBlockClass(int64_t block) { return residual::Clamp(residual::Log2Floor(block), 0, 15); }

    /** The residual's factor of blocks_[b]'s class (1 without one). */
    double ResidualBlock(int b) const {
        return residual_ ? s_.residualFactor[residual::kOffsets.at[residual::kBlockClass] + ResidualBlockClass(blocks_[b])]
                         : 1.0;
    }

    /**
     * Every configuration of c cores (tiles 1..tiles_): their traffic, and a floor for their widest cores, which
     * hold e elements from ceil(n / c) to widestTop_[c]. Where every such e runs as many tiles at each tile size
     * as the least does, the least one's floor holds for all (a wider core has a larger last tile); else the
     * floor of the first e past it with one tile more (its last tile at its least) bounds the wider ones.
     */
    RefitRange CoresRange(int64_t c) const {
        const CoreLines& l = w_.lines[c];
        const int64_t e = CeilDiv(n_, c), xlo = stepElems_, xhi = tiles_ * stepElems_;
        const int64_t t = CeilDiv(e, xhi);
        double core;
        if (t == CeilDiv(e, xlo)) {  // one tile count for the least e over the range
            core = l.RangeUs(e, Lines::Either, xlo, xhi, true);
            const int64_t wider = t * xlo + 1;  // the least e that runs t + 1 tiles at some tile size of the range
            if (wider <= widestTop_[c]) core = std::min(core, l.RangeUs(wider, Lines::Either, xlo, xhi, false));
        } else {
            core = l.RangeUs(e, Lines::Either, xlo, xhi, false);
        }
        const double res = LooseResidual(c, coresBlock_[c], 0.0);
        RefitRange r = RangeOf(EngineFloor(c, core), res, 1, tiles_, c, kEveryBlock);
        if (Traded(e, xlo, xhi) && CanWin(r)) {  // (a range that cannot win is dropped as it is)
            r = RangeOf(EngineFloor(c, std::max(core, l.TradeUs(e, widestTop_[c], Lines::Either, xlo, xhi))), res, 1,
                        tiles_, c, kEveryBlock);
        }
        return r;
    }

    /** Tiles tiLo..tiHi of the pairs of c cores whose widest core is widths[c][i]: their traffic (CoresTrafficUs)
     *  and that core's floor over the range (RangeUs, and TradeUs where it runs few tiles). */
    RefitRange WidthRange(int64_t c, int i, int64_t tiLo, int64_t tiHi) {
        const CoreLines& l = w_.lines[c];
        const RefitWidth& wd = w_.widths[c][i];
        const int64_t xlo = tiLo * stepElems_, xhi = tiHi * stepElems_;
        const double serial = xhi >= wd.elems ? SerialOf(c, i) : -1.0;
        const double core = l.RangeUs(wd.elems, wd.lines, xlo, xhi, true, serial);
        const double res = LooseResidual(c, 0.0, wd.residualPair);
        RefitRange r = RangeOf(EngineFloor(c, core), res, tiLo, tiHi, c, WidthBlock(i));
        if (Traded(wd.elems, xlo, xhi) && CanWin(r)) {  // (a range that cannot win is dropped as it is)
            r = RangeOf(EngineFloor(c, std::max(core, l.TradeUs(wd.elems, wd.elems, wd.lines, xlo, xhi, serial))), res,
                        tiLo, tiHi, c, WidthBlock(i));
        }
        return r;
    }

    /** Whether a range's floor takes CoreLines::TradeUs: a range of more than one tile where a core of e elements
     *  runs few tiles at its largest (with many, the last tiles' drain is a small part of the time). */
    static bool Traded(int64_t e, int64_t xlo, int64_t xhi) { return xhi > xlo && xlo < e && CeilDiv(e, xhi) <= kTradeTiles; }

    /** Where to split tiLo..tiHi (returns the lower part's last tile index) of a core whose widest kind has e
     *  elements: by tile count where the range spans more than one (at the geometric middle), else by tile. */
    int64_t SplitPoint(int64_t e, int64_t tiLo, int64_t tiHi) const {
        const int64_t t1 = CeilDiv(e, tiHi * stepElems_), t2 = CeilDiv(e, tiLo * stepElems_);
        if (t2 > t1) {
            const double geometric = std::sqrt(static_cast<double>(t1) * static_cast<double>(t2));
            const int64_t mid = std::min(std::max(static_cast<int64_t>(geometric), t1), t2 - 1);
            const int64_t from = CeilDiv(CeilDiv(e, mid), stepElems_);  // tiles from here up run at most mid tiles
            return std::min(std::max(from, tiLo + 1), tiHi) - 1;
        }
        return tiLo + (tiHi - tiLo) / 2;
    }

    /** 2. A core count's range: one range per widest core of its pairs (Widths). The core count's engine floor is
     *  under every width's: with a width's own pairs' residual it drops the widths that cannot win before their
     *  floors are computed (on a device table's 40 slowest first calls, 99 of the 152 a call pushed for nothing). */
    void OpenCores(const RefitRange& r) {
        const int64_t c = r.cores;
        Widths(c);
        for (int i = 0; i < w_.widthCount[c]; ++i) {
            if (residual_ && !CanWin(r.engine * LooseResidual(c, 0.0, w_.widths[c][i].residualPair),
                                     r.tiHi * kTileStepBytes, c, WidthBlock(i))) {
                continue;
            }
            Push(WidthRange(c, i, r.tiLo, r.tiHi));
        }
    }

    /** 3. A widest core's range: split by tile while that core runs more than one tile, else opened into its
     *  pairs (4. and 5.). */
    void OpenWidth(const RefitRange& r) {
        const int64_t c = r.cores;
        const int i = WidthOf(r);
        const int64_t e = w_.widths[c][i].elems;
        if (r.tiHi > r.tiLo && r.tiLo * stepElems_ < e) {
            int64_t tiHi = r.tiHi;
            if (r.floor >= bestUs_) {  // at best a tie, which its largest tile wins over the rest: that tile first
                TopTile(r);
                if (!CanWin(r.floor, (--tiHi) * kTileStepBytes, c, r.block)) return;
            }
            const int64_t mid = SplitPoint(e, r.tiLo, tiHi);
            if (mid + 1 > tiHi) return Push(WidthRange(c, i, r.tiLo, tiHi));
            Push(WidthRange(c, i, mid + 1, tiHi));
            Push(WidthRange(c, i, r.tiLo, mid));
            return;
        }
        const RefitPair* previous = nullptr;
        for (int b = 0; b < nBlocks_; ++b) {
            if (c > coresMax_[b] || w_.widthOf[b][c] != i) continue;
            const RefitPair& p = PairOf(b, c);
            if (previous != nullptr && SamePredictions(*previous, p)) continue;  // the larger block wins every tie
            previous = &p;
            if (!CanWin(std::max(p.trafficUs, r.floor), r.tiHi * kTileStepBytes, c, b)) continue;
            if (r.tiLo * stepElems_ >= e) {
                OneTile(p, c, b, r.tiLo, r.tiHi);  // one tile a core at every tile: its prediction at once
            } else {
                Config(p, c, b, r.tiLo);  // one tile (tiLo == tiHi): the configuration's own floor is tighter
            }
        }
    }

    /**
     * OneTileUs(WithTile(p.kinds, te), k_, s_, hit_) to the bit, each core kind's one-tile time computed only
     * where no kind as wide and as aligned bounds it (StageOf rises with the elements where the SoC's copy
     * curves do: curvesRise_), the widest kind's taken from its width (SerialOf: the same operations).
     */
    double OneTilePairUs(const RefitPair& p, int64_t c, int b, int64_t te) {
        const Kinds kd = WithTile(p.kinds, te);
        const auto [share, l2Share, rowUs] = ShareOf(kd.cores, k_, s_, agg_);
        const int wi = w_.widthOf[b][c];
        const RefitWidth& width = w_.widths[c][wi];
        double coreUs = 0.0;
        for (int i = 0; i < 3; ++i) {
            if (kd.counts[i] <= 0 || kd.tiles[i] <= 0) continue;
            if (curvesRise_ && Bounded(kd, i)) continue;
            double serial;
            if (kd.tail[i] == width.elems && kd.aligned[i] == (width.lines == Lines::Aligned)) {
                serial = SerialOf(c, wi);
            } else {
                const Stage t = StageOf(static_cast<double>(kd.tail[i]), k_, s_, share, kd.aligned[i], -1.0, l2Share);
                serial = t.in + t.vec + t.out;
            }
            coreUs = std::max(coreUs, serial + s_.coreStartUs + rowUs);
        }
        return s_.launchUs + std::max(coreUs, TrafficUs(kd, k_, s_, agg_));
    }

    /** Whether another kind of kd's that runs is at least as wide as kind i and as aligned (the first of equals
     *  counts): then its one tile takes at least as long, where the curves rise. */
    static bool Bounded(const Kinds& kd, int i) {
        for (int j = 0; j < 3; ++j) {
            if (j == i || kd.counts[j] <= 0 || kd.tiles[j] <= 0 || kd.aligned[j] != kd.aligned[i]) continue;
            if (kd.tail[j] > kd.tail[i] || (kd.tail[j] == kd.tail[i] && j < i)) return true;
        }
        return false;
    }

    /** widths[c][i] run as one tile (computed at its first use): Evaluate's stages of a one-tile core. */
    double SerialOf(int64_t c, int i) {
        RefitWidth& wd = w_.widths[c][i];
        if (wd.serialUs < 0.0) {
            const double cores = static_cast<double>(c);
            const Stage one = StageOf(static_cast<double>(wd.elems), k_, s_, agg_ / cores, wd.lines == Lines::Aligned,
                                      -1.0, s_.l2Gbps / cores);
            wd.serialUs = one.in + one.vec + one.out;
        }
        return wd.serialUs;
    }

    /** A width range's largest tile, every pair of it (what wins a tie over the rest of the range). */
    void TopTile(const RefitRange& r) {
        const int64_t c = r.cores;
        const RefitPair* previous = nullptr;
        for (int b = 0; b < nBlocks_; ++b) {
            if (c > coresMax_[b] || w_.widthOf[b][c] != WidthOf(r)) continue;
            const RefitPair& p = PairOf(b, c);
            if (previous != nullptr && SamePredictions(*previous, p)) continue;  // the larger block wins every tie
            previous = &p;
            if (r.tiHi >= CeilDiv(p.widest, stepElems_)) {
                OneTile(p, c, b, r.tiHi, r.tiHi);
            } else {
                Config(p, c, b, r.tiHi);
            }
        }
    }

    /** The widest cores (and their lines) of the pairs of c cores, each once, and which is each pair's. */
    void Widths(int64_t c) {
        if (w_.widthsEpoch[c] == w_.epoch) return;  // made in this search
        w_.widthsEpoch[c] = w_.epoch;
        RefitWidth* widths = w_.widths[c];
        int count = 0;
        for (int b = 0; b < nBlocks_; ++b) {
            if (c > coresMax_[b]) continue;
            const WidestKind& widest = w_.widest.Of(b, c);
            const Lines lines = widest.aligned ? Lines::Aligned : Lines::Misaligned;
            int i = 0;
            while (i < count && (widths[i].elems != widest.elems || widths[i].lines != lines)) ++i;
            if (i == count) widths[count++] = RefitWidth{widest.elems, lines, -1.0, residual_ ? INFINITY : 1.0};
            if (residual_) {
                const double pair = floors_.PairFactor(ResidualBlockClass(blocks_[b]), widest.allAligned, widest.structure);
                w_.pairResidual[b][c] = pair;
                widths[i].residualPair = std::min(widths[i].residualPair, pair);
            }
            w_.widthOf[b][c] = static_cast<int8_t>(i);
        }
        w_.widthCount[c] = count;
    }

    /** Two pairs of one core count whose cores split the elements alike (and whose knob corrections are alike)
     *  predict alike at every tile. */
    static bool SamePredictions(const RefitPair& a, const RefitPair& b) {
        for (int i = 0; i < 3; ++i) {
            if (a.kinds.counts[i] != b.kinds.counts[i]) return false;
            if (a.kinds.counts[i] > 0 && (a.kinds.elems[i] != b.kinds.elems[i] || a.kinds.aligned[i] != b.kinds.aligned[i])) {
                return false;
            }
        }
        return a.blockFactor == b.blockFactor && a.residualBlock == b.residualBlock;
    }

    /** The pair's kinds, widest core (its width's) and traffic with its least knob correction (at its first use). */
    const RefitPair& PairOf(int b, int64_t c) {
        RefitPair& p = w_.pairs[b][c];
        if (p.epoch == w_.epoch) return p;
        if (stats_) ++stats_->pairs;
        Widths(c);
        p.epoch = w_.epoch;
        p.kinds = KindsOf(n_, k_.elemBytes, blocks_[b], kTileStepBytes, c);  // kinds.cores == c: c <= its blocks
        const RefitWidth& width = w_.widths[c][w_.widthOf[b][c]];
        p.widest = width.elems;
        const double factorFloor = KnobFactorFloor(s_, k_, blocks_[b], bn_, c);  // under every configuration's
        p.blockFactor = corrected_ ? s_.blockFactor[BlockClass(blocks_[b])] : 1.0;
        p.residualBlock = ResidualBlock(b);
        const double res = residual_ ? LooseResidual(c, 0.0, w_.pairResidual[b][c]) : 1.0;  // (Widths sets it)
        // at the slice's largest tile: the fewest tiles, so the least a per-tile scalar queue moves (without one,
        // the traffic is the same at every tile)
        p.trafficUs =
            (s_.launchUs + TrafficUs(WithTile(p.kinds, tiles_ * stepElems_), k_, s_, agg_)) * factorFloor * res;
        return p;
    }

    /** 4. Tiles tiLo..tiHi that hold every core in one: they predict alike but for their knob correction (by
     *  alignment class, which repeats every 8 tiles), so the largest tile of each class is its only candidate;
     *  with a residual, by tile size class and place in the page (kPageSteps tiles) too. */
    void OneTile(const RefitPair& p, int64_t c, int b, int64_t tiLo, int64_t tiHi) {
        const double us = OneTilePairUs(p, c, b, tiHi * stepElems_);
        if (residual_) {
            // Every core runs one tile at each of these tiles, so the residual's levels differ only by the tile's
            // place in the page and size class: their product with the rest's (`fixed`) is the factor up to the
            // order of rounding (a relative 1e-12 covers it). A candidate that cannot win by that floor is not
            // priced exactly (measured: pricing every candidate was half of a device table's first call).
            const Kinds top = WithTile(p.kinds, tiHi * stepElems_);
            int64_t levels[residual::kFeatures];
            residual::LevelsOf(top, k_.elemBytes, blocks_[b], bn_, tiHi * kTileStepBytes, levels);
            double fixed = 1.0;
            for (int f = 0; f < residual::kFeatures; ++f) {
                if (!residual::SetByTile(f)) fixed *= s_.residualFactor[residual::kOffsets.at[f] + levels[f]];
            }
            for (int64_t hi = tiHi; hi >= tiLo;) {  // one size class at a time, from the largest
                const int64_t cls = residual::TileSizeLevel(hi * kTileStepBytes);
                const int64_t classLo = std::max<int64_t>(tiLo, CeilDiv(int64_t{1} << cls, kTileStepBytes));
                const double sized = us * fixed * floors_.Size(cls) * (1.0 - 1e-12);
                for (int64_t ti = hi; ti >= classLo && ti > hi - residual::kPageSteps; --ti) {
                    const int64_t tile = ti * kTileStepBytes;
                    const double knob = corrected_ ? KnobFactor(s_, k_, blocks_[b], bn_, tile, c) : 1.0;
                    if (!CanWin(sized * floors_.Page(ti) * knob * (1.0 - 1e-12), tile, c, b)) continue;
                    const double f = ConfigFactor(s_, k_, WithTile(top, tile / k_.elemBytes), blocks_[b], bn_, tile);
                    Consider(f != 1.0 ? us * f : us, tile, c, b);  // PredictConfig's corrected prediction
                }
                hi = classLo - 1;
            }
            return;
        }
        for (int64_t ti = tiHi; ti >= tiLo && ti > tiHi - (corrected_ ? 8 : 1); --ti) {
            const int64_t tile = ti * kTileStepBytes;
            const double factor = KnobFactor(s_, k_, blocks_[b], bn_, tile, c);
            Consider(factor != 1.0 ? us * factor : us, tile, c, b);  // PredictConfig's corrected prediction
        }
    }

    /** 5. One configuration: its floor, its chain bound, and only then its simulation. */
    void Config(const RefitPair& p, int64_t c, int b, int64_t ti) {
        if (stats_) ++stats_->configs;
        const int64_t tile = ti * kTileStepBytes, te = tile / k_.elemBytes;
        const Kinds kd = WithTile(p.kinds, te);  // == KindsOf(n, elem, block, tile, cores)
        const double factor = ConfigFactor(s_, k_, kd, blocks_[b], bn_, tile);
        if (!CanWin(Floor(w_.lines[c].ConfigUs(kd, te)) * factor, tile, c, b)) return;
        if (stats_) ++stats_->bounded;
        const Prediction bound = Evaluate(kd, te, bn_, k_, s_, false, -1.0, hit_);
        const double lower = bound.lower * factor;
        if (!CanWin(lower - (kPruneMarginUs + kPruneRelative * lower), tile, c, b)) return;
        if (stats_ && !bound.certain) ++stats_->simulated;
        const double us = bound.certain ? bound.lower : Evaluate(kd, te, bn_, k_, s_, true, -1.0, hit_).us;
        Consider(factor != 1.0 ? us * factor : us, tile, c, b);  // PredictConfig's corrected prediction
    }

    /** Queue a range that may still win: the lowest floor first, among equal floors the first in the
     *  tie-break. A full queue searches the range at once, tile by tile: slower, never wrong. */
    void Push(const RefitRange& r) {
        if (stats_) ++stats_->ranges;
        if (!CanWin(r)) return;
        if (queued_ == queueLimit_) return Exhaust(r);
        RefitRange* q = w_.queue;
        int64_t i = queued_++;
        while (i > 0 && Sooner(r, q[(i - 1) / 2])) {  // a binary heap
            q[i] = q[(i - 1) / 2];
            i = (i - 1) / 2;
        }
        q[i] = r;
        if (stats_) stats_->peakQueue = std::max<int64_t>(stats_->peakQueue, queued_);
    }

    RefitRange Pop() {
        RefitRange* q = w_.queue;
        const RefitRange top = q[0];
        const RefitRange last = q[--queued_];
        int64_t i = 0;
        for (int64_t child = 1; child < queued_; child = 2 * i + 1) {
            if (child + 1 < queued_ && Sooner(q[child + 1], q[child])) ++child;
            if (!Sooner(q[child], last)) break;
            q[i] = q[child];
            i = child;
        }
        q[i] = last;
        return top;
    }

    static bool Sooner(const RefitRange& a, const RefitRange& b) {
        if (a.floor != b.floor) return a.floor < b.floor;
        if (a.tiHi != b.tiHi) return a.tiHi > b.tiHi;
        if (a.tiHi - a.tiLo != b.tiHi - b.tiLo) return a.tiHi - a.tiLo < b.tiHi - b.tiLo;
        if (a.cores != b.cores) return a.cores > b.cores;
        return a.block < b.block;
    }

    /** Every configuration of a range, one by one (what a full queue does instead of queueing it). */
    void Exhaust(const RefitRange& r) {
        for (int b = 0; b < nBlocks_; ++b) {
            if (r.cores > coresMax_[b]) continue;
            if (r.block < kEveryBlock && w_.widthOf[b][r.cores] != WidthOf(r)) continue;  // another widest core's
            const RefitPair& p = PairOf(b, r.cores);
            const int64_t one = CeilDiv(p.widest, stepElems_);
            if (r.tiHi >= one) OneTile(p, r.cores, b, std::max<int64_t>(one, r.tiLo), r.tiHi);
            for (int64_t ti = std::min<int64_t>(r.tiHi, one - 1); ti >= r.tiLo; --ti) Config(p, r.cores, b, ti);
        }
    }

    RefitScratch& w_;
    const int64_t n_;
    const int64_t* blocks_;
    const int nBlocks_;
    const int64_t bn_, tiles_;
    const KernelModel& k_;
    const SocModel& s_;
    RefitStats* stats_;
    const int queueLimit_;
    const double hit_, agg_;
    const bool corrected_;
    const bool residual_;  // the SoC has a residual and the kernel takes it
    residual::Floors floors_;  // its floors at this buffer count (residual_ only)
    const int64_t stepElems_;  // elements per tile step
    int64_t coresMax_[kMaxBlocks] = {};
    bool curvesRise_ = false;  // the copy curves never fall: a copy of more bytes never takes less time
    int64_t widestTop_[kMaxCores + 1] = {};  // per core count: no pair's widest core holds more
    double coresBlock_[kMaxCores + 1] = {};  // per core count: the least residual block factor of its blocks
    int64_t topCores_ = 0;
    int64_t queued_ = 0;
    double bestUs_ = INFINITY;  // the least prediction seen (not rounded)
    Best best_;
};

/** This thread's re-fit scratch (~390 KiB), reused: not on the stack, not allocated per call. */
inline RefitScratch& ThreadScratch() {
    static thread_local RefitScratch scratch;
    return scratch;
}

/** Refit on scratch w as part of `call` (RefitScratch::calls: a search of the same call finds its core counts'
 *  lines made). */
inline RefitChoice RefitOn(RefitScratch& w, uint64_t call, int64_t n, const int64_t* blocks, int nBlocks, int64_t bn,
                           int64_t tileTop, int64_t maxCores, const KernelModel& k, const SocModel& s,
                           int64_t seedBlock, int64_t seedTile, int64_t seedCores, RefitStats* stats, double bound) {
    const int64_t tiles = std::min(tileTop / kTileStepBytes, kMaxTiles);
    if (n <= 0 || nBlocks <= 0 || nBlocks > kMaxBlocks || tiles < 1) return RefitChoice{-1, -1, -1, INFINITY};
    w.call = call;
    RefitSearch search(w, n, blocks, nBlocks, bn, tiles, maxCores, k, s, stats);
    search.Bound(bound);
    search.Seed(seedBlock, seedTile, seedCores);
    const RefitChoice choice = search.Run();
    w.call = 0;
    return choice;
}

/** RefitSearch over one slice: tiles up to tileTop, the blocks in descending order, 1 to maxCores cores;
 *  the seed (any configuration of the slice, or none) only speeds it up; a bound (RefitSearch::Bound) leaves
 *  out what cannot tie it. */
inline RefitChoice Refit(int64_t n, const int64_t* blocks, int nBlocks, int64_t bn, int64_t tileTop, int64_t maxCores,
                         const KernelModel& k, const SocModel& s, int64_t seedBlock, int64_t seedTile,
                         int64_t seedCores, RefitStats* stats = nullptr, double bound = INFINITY) {
    RefitScratch& w = ThreadScratch();
    return RefitOn(w, ++w.calls, n, blocks, nBlocks, bn, tileTop, maxCores, k, s, seedBlock, seedTile, seedCores, stats,
                   bound);
}

/** Whether the SoC's model carries what a sweep learnt on a device (a knob correction or a residual): its
 *  re-fit at an untimed size searches every buffer count (RefitAcross), not only the bucket's. */
inline bool Learned(const SocModel& s) { return s.blockFactor != nullptr || s.residualFactor != nullptr; }

/** One buffer count's slice of RefitAcross: tiles up to tileTop bytes (below kTileStepBytes: none fits). */
struct RefitSlice {
    int64_t bufferNum;
    int64_t tileTop;
};

/** RefitAcross's pick: the slice's choice and its buffer count (-1: no tile fits any slice). */
struct RefitPick {
    RefitChoice choice;
    int64_t bufferNum;
};

/** At most this many slices are ordered (RefitAcross searches more in the order given). */
constexpr int kOrderedSlices = 8;

/** The slices' order of search (count <= kOrderedSlices): by the seed's (block, tile, cores) at each slice's
 *  buffer count, its chain bound (Evaluate without the schedule: a few chains, not a simulation) the least
 *  first (a slice whose tiles the seed does not fit after the others; the order given among equals). The
 *  slice searched first bounds the others: on a realised:3 device table's 1,478 re-fits the bucket's slice held
 *  the pick in 1,126, and searching the pick's slice first took 80% of the time at the median, 70% at p90.
 *  This order, side by side with the bucket's first on three device tables (benchmarks/refit_ab.py): the
 *  slowest 2% of first calls x0.863, x0.992, x0.964; all calls x0.898, x1.024, x0.999. */
inline void SliceOrder(int64_t n, const RefitSlice* slices, int count, const KernelModel& k, const SocModel& s,
                       int64_t seedBlock, int64_t seedTile, int64_t seedCores, int* order) {
    double us[kOrderedSlices];
    const double hit = DefaultHit(k, s, n);
    for (int i = 0; i < count; ++i) {
        order[i] = i;
        const bool fits = seedBlock > 0 && seedCores >= 1 && seedTile >= kTileStepBytes &&
                          seedTile % kTileStepBytes == 0 && seedTile <= slices[i].tileTop;
        us[i] = fits && count > 1
                    ? PredictConfig(n, seedBlock, slices[i].bufferNum, seedTile, seedCores, k, s, hit, false).lower
                    : INFINITY;
    }
    for (int i = 1; i < count; ++i) {  // a stable insertion sort (no allocation: std::stable_sort may take a buffer)
        const int at = order[i];
        int j = i;
        for (; j > 0 && us[at] < us[order[j - 1]]; --j) order[j] = order[j - 1];
        order[j] = at;
    }
}

/**
 * The fastest configuration of several buffer counts' slices (every block, core count and tile of each), in the
 * space's order (ConfigBefore): what score_space(...).best_index() picks over them. The slices are searched in
 * SliceOrder's order, each bounded by the least prediction of those before it (a slice that cannot tie it ends
 * fast). Same pick in any order.
 */
inline RefitPick RefitAcross(int64_t n, const int64_t* blocks, int nBlocks, const RefitSlice* slices, int count,
                             int64_t maxCores, const KernelModel& k, const SocModel& s, int64_t seedBlock,
                             int64_t seedTile, int64_t seedCores, RefitStats* stats = nullptr) {
    RefitPick best{RefitChoice{-1, -1, -1, INFINITY}, -1};
    double bound = INFINITY;
    int order[kOrderedSlices];
    const bool ordered = count <= kOrderedSlices;
    if (ordered) SliceOrder(n, slices, count, k, s, seedBlock, seedTile, seedCores, order);
    RefitScratch& w = ThreadScratch();
    const uint64_t call = ++w.calls;  // every slice's search: one size, kernel and SoC
    for (int j = 0; j < count; ++j) {
        const int i = ordered ? order[j] : j;
        const RefitChoice c = RefitOn(w, call, n, blocks, nBlocks, slices[i].bufferNum, slices[i].tileTop, maxCores,
                                      k, s, seedBlock, seedTile, seedCores, stats, bound);
        if (c.blockBytes <= 0) continue;
        bound = std::min(bound, c.us);
        const ConfigKey key{c.key, slices[i].bufferNum, c.tileBytes, c.coreNum, c.blockBytes};
        const RefitChoice& b = best.choice;
        if (best.bufferNum < 0 || ConfigBefore(key, ConfigKey{b.key, best.bufferNum, b.tileBytes, b.coreNum, b.blockBytes})) {
            best = RefitPick{c, slices[i].bufferNum};
        }
    }
    return best;
}

}  // namespace cost
}  // namespace bce_grad

#endif  // BCE_GRAD_REFIT_H
