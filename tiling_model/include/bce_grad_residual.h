/**
 * The realised-tiling classes a device's learned residual prices (tiling_model/residual.py fits one log
 * factor per level): what the knobs make of a size, each feature a small table of levels, and a SoC's factor
 * table over them (SocModel::residualFactor: one factor per level, features in Feature order). One source:
 * Python reads the levels through the engine binding (_engine.residual_levels); the engine's prediction
 * (cost::PredictConfig), its re-fit's floors (Floors) and the exported header's TunedTiling price them here.
 * Included by bce_grad_cost_model.h before its core kinds exist: LevelsOf takes them as a template.
 */
#ifndef BCE_GRAD_RESIDUAL_H
#define BCE_GRAD_RESIDUAL_H

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace bce_grad {
namespace residual {

constexpr int kBuffers = 5;          // BUFFER_NUM 0 .. 4
constexpr int kTileSizeClasses = 19;  // log2 of the tile's bytes, to 256 KiB
constexpr int kPageSteps = 16;        // a copy's bytes within an 8 KiB page, in 512-B steps
constexpr int kTilesEach = 32;        // tiles per core: each count to 32 its own bin,
constexpr int kTilesBins = kTilesEach + 5;  // then to 40, 48, 64, 96, 128
constexpr int kTilesLevels = kTilesBins + 1;
constexpr int64_t kTilesBinTop[kTilesBins - kTilesEach] = {40, 48, 64, 96, 128};
constexpr int kTailGrainCount = 6;  // the last copy's bytes against 32 B and every power of two 512 B .. 8 KiB
constexpr int64_t kTailGrains[kTailGrainCount] = {32, 512, 1024, 2048, 4096, 8192};
constexpr int kTailLevels = kTailGrainCount + 1;

enum Feature : int {
    kBufferNum,
    kBlockClass,
    kCores,
    kCoresOddXBuffers,
    kTileAlign,
    kTileAlignXBuffers,
    kTileInPageXBuffers,
    kTileSize,
    kTileSizeXBuffers,
    kTailAlign,
    kTailAlignXTiles,
    kTilesXBuffers,
    kCoreBoundsAlignedXBuffers,
    kStructure,
    kFeatures
};

/** Levels of each feature, in Feature order (the factor tables' sizes). */
constexpr int kLevels[kFeatures] = {
    kBuffers,      16, 65, 2 * kBuffers, 5, 5 * kBuffers, kPageSteps * kBuffers, kTileSizeClasses,
    kTileSizeClasses * kBuffers, kTailLevels, kTailLevels * kTilesLevels, kTilesLevels * kBuffers, 2 * kBuffers, 4};

/** Where each feature's factors start in a SoC's table. */
constexpr int OffsetOf(int feature) {
    int offset = 0;
    for (int f = 0; f < feature; ++f) offset += kLevels[f];
    return offset;
}

constexpr int kWidth = OffsetOf(kFeatures);  // factors in a SoC's table
constexpr const char* kNames[kFeatures] = {
    "buffer_num", "block_class", "cores", "cores_odd_x_buffers", "tile_align", "tile_align_x_buffers",
    "tile_in_page_x_buffers", "tile_size", "tile_size_x_buffers", "tail_align", "tail_align_x_tiles",
    "tiles_x_buffers", "core_bounds_aligned_x_buffers", "structure"};

inline int64_t Clamp(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : (v > hi ? hi : v); }

/** floor(log2(v)) for v >= 1 (0 below). */
inline int64_t Log2Floor(int64_t v) { return v > 1 ? 63 - __builtin_clzll(static_cast<uint64_t>(v)) : 0; }

/** The largest of grains[0..count) dividing bytes, as its index + 1 (0: none divides). */
inline int64_t AlignLevel(int64_t bytes, const int64_t* grains, int count) {
    int64_t level = 0;
    for (int i = 0; i < count; ++i) {
        if (bytes % grains[i] == 0) level = i + 1;
    }
    return level;
}

/** The tiles-per-core bins of 0 .. 128 tiles (TilesBin's table: a search asks for bins at every range). */
struct TilesBins {
    int8_t of[kTilesBinTop[kTilesBins - kTilesEach - 1] + 1];
    constexpr TilesBins() : of() {
        for (int64_t t = 0; t <= kTilesBinTop[kTilesBins - kTilesEach - 1]; ++t) {
            int64_t bin = t < 1 ? 0 : t - 1;
            for (int i = kTilesBins - kTilesEach - 1; t > kTilesEach && i >= 0; --i) {
                if (t <= kTilesBinTop[i]) bin = kTilesEach + i;
            }
            of[t] = static_cast<int8_t>(bin);
        }
    }
};
constexpr TilesBins kTilesBinOf{};

/** The tiles-per-core bin: each count to kTilesEach its own, then 33-40, 41-48, 49-64, 65-96, 97-128, more. */
inline int64_t TilesBin(int64_t tiles) {
    return tiles <= kTilesBinTop[kTilesBins - kTilesEach - 1] ? kTilesBinOf.of[tiles < 0 ? 0 : tiles] : kTilesBins;
}

/** The last copy's alignment level: AlignLevel(bytes, kTailGrains, kTailGrainCount), from its trailing zero
 *  bits (the grains are 2^5 and 2^9 .. 2^13). */
inline int64_t TailLevel(int64_t bytes) {
    static_assert(kTailGrains[0] == 32 && kTailGrains[1] == 512 && kTailGrains[kTailGrainCount - 1] == 8192, "grains");
    if (bytes == 0) return kTailGrainCount;
    const int64_t zeros = __builtin_ctzll(static_cast<uint64_t>(bytes));
    return zeros >= 13 ? kTailGrainCount : (zeros >= 9 ? zeros - 7 : (zeros >= 5 ? 1 : 0));
}

/** The tile's alignment level (its largest divisor of 1, 2, 4, 8 KiB, as its index + 1; 0: none). */
inline int64_t TileAlignLevel(int64_t tile) {
    static const int64_t kTileGrains[4] = {1024, 2048, 4096, 8192};
    return AlignLevel(tile, kTileGrains, 4);
}

/** The tile's size class: log2 of its bytes. */
inline int64_t TileSizeLevel(int64_t tile) { return Clamp(Log2Floor(tile), 0, kTileSizeClasses - 1); }

/** Whether a feature's level is set by the tile alone: its place in the page or its size class (what
 *  Floors::Page and Floors::Size price). */
constexpr bool SetByTile(int feature) {
    return feature == kTileAlign || feature == kTileAlignXBuffers || feature == kTileInPageXBuffers ||
           feature == kTileSize || feature == kTileSizeXBuffers;
}

/** Every feature's level of one exact-scheme configuration whose kinds are k (cost::Kinds; elem bytes per
 *  element). */
template <class CoreKinds>
inline void LevelsOf(const CoreKinds& k, int64_t elem, int64_t block, int64_t bn, int64_t tile, int64_t* out) {
    const int64_t b = Clamp(bn, 0, kBuffers - 1);
    int slowest = 0;  // the kind with most tiles among those with cores (the first on a tie)
    int64_t most = -1;
    bool aligned = true;
    for (int i = 0; i < 3; ++i) {
        const int64_t t = k.counts[i] > 0 ? k.tiles[i] : -1;
        if (t > most) {
            most = t;
            slowest = i;
        }
        if (k.counts[i] > 0 && !k.aligned[i]) aligned = false;
    }
    const int64_t tiles = most > 0 ? most : 0;
    const int64_t tailBytes = k.tail[slowest] * elem;
    const int64_t tileAlign = TileAlignLevel(tile);
    const int64_t size = TileSizeLevel(tile);
    const int64_t tilesBin = TilesBin(tiles);
    const int64_t tailAlign = TailLevel(tailBytes);
    out[kBufferNum] = b;
    out[kBlockClass] = Clamp(Log2Floor(block), 0, 15);
    out[kCores] = Clamp(k.cores, 0, 64);
    out[kCoresOddXBuffers] = (k.cores % 2) * kBuffers + b;
    out[kTileAlign] = tileAlign;
    out[kTileAlignXBuffers] = tileAlign * kBuffers + b;
    out[kTileInPageXBuffers] = ((tile % 8192) / 512) * kBuffers + b;
    out[kTileSize] = size;
    out[kTileSizeXBuffers] = size * kBuffers + b;
    out[kTailAlign] = tailAlign;
    out[kTailAlignXTiles] = tailAlign * kTilesLevels + tilesBin;
    out[kTilesXBuffers] = tilesBin * kBuffers + b;
    out[kCoreBoundsAlignedXBuffers] = (aligned ? 1 : 0) * kBuffers + b;
    out[kStructure] = (k.counts[1] > 0 ? 2 : 0) + (k.counts[2] > 0 ? 1 : 0);
}

/** Where each feature's factors start in a SoC's table, as an array (a loop reads it at run time). */
struct Offsets {
    int at[kFeatures];
    constexpr Offsets() : at() {
        for (int f = 0; f < kFeatures; ++f) at[f] = OffsetOf(f);
    }
};
constexpr Offsets kOffsets{};

/** A configuration's factor: its levels' factors multiplied in Feature order (what every prediction carries). */
inline double FactorOf(const double* table, const int64_t* levels) {
    double f = 1.0;
    for (int i = 0; i < kFeatures; ++i) f *= table[kOffsets.at[i] + levels[i]];
    return f;
}

/** What a search knows of a range of configurations of one core count: their tiles (tile indices of
 *  kPageStepBytes), the elements of their widest core kind (where Floors::Exact is asked), the block classes'
 *  factor (the table's; 0: any of the slice's), and the product of the block class's, core-boundary
 *  alignment's and structure's factors where a pair, or the least over a width's pairs, is known (0: not
 *  known, the least of each taken). */
struct RangeKnown {
    int64_t cores;
    int64_t tiLo, tiHi;
    int64_t elems;
    int64_t stepElems;  // elements per tile index
    double blockFactor = 0.0;
    double pairFactor = 0.0;
};

constexpr int64_t kPageStepBytes = 512;  // a tile index's bytes: the place in the page is its index mod kPageSteps

/**
 * Floors under the factor of every configuration of a range (FactorOf), for one BUFFER_NUM, in two grades. The
 * features are grouped by what sets them: the tile's place in the page (its alignment and page step), its size
 * class, the widest core's tiles and its last copy's alignment, and the rest (set by the cores and the pair).
 * Loose: the rest as known times every other group's least over the whole table, in a few products: what a
 * range is queued with. Exact: a width's tiles one by one, each group at the tile's own level (the least of
 * their product, not the product of their least): what a range is opened with, once it is the queue's first.
 * Measured on a device table's first calls: the two grades cost less than one grade between them (a least per
 * size class over runs of tile counts) at every range, the picks the same.
 *
 * The last copy: the slowest core kind is the widest (the first that runs: big, else small, else the last
 * core), so a width's last copy at a tile is its widest core's last tile. A relative 1e-12 covers the
 * products' different order of rounding.
 */
class Floors {
public:
    Floors() = default;
    /** blockClasses: the block classes of the slice (count of them), the only ones a range of it holds. Set in
     *  place (a search has one, set once per call). */
    void Set(const double* table, int64_t bufferNum, const int64_t* blockClasses, int count) {
        t_ = table;
        const int64_t b = Clamp(bufferNum, 0, kBuffers - 1);
        buffers_ = b;
        block_ = INFINITY;
        for (int i = 0; i < count; ++i) block_ = std::min(block_, At(kBlockClass, blockClasses[i]));
        double page = INFINITY;
        for (int64_t r = 0; r < kPageSteps; ++r) {
            const int64_t align = TileAlignLevel(r * kPageStepBytes + (r == 0 ? 8192 : 0));
            page_[r] = At(kTileAlign, align) * At(kTileAlignXBuffers, align * kBuffers + b) *
                       At(kTileInPageXBuffers, r * kBuffers + b);
            page = std::min(page, page_[r]);
        }
        pageLeast_ = page;
        double size = INFINITY;
        for (int64_t l = 0; l < kTileSizeClasses; ++l) {
            size_[l] = At(kTileSize, l) * At(kTileSizeXBuffers, l * kBuffers + b);
            size = std::min(size, size_[l]);
        }
        double tiles = INFINITY;
        for (int64_t t = 0; t < kTilesLevels; ++t) {
            for (int64_t a = 0; a < kTailLevels; ++a) tiles = std::min(tiles, TailOf(a, t) * At(kTilesXBuffers, t * kBuffers + b));
        }
        tileSet_ = page * size * tiles;
        bounds_ = std::min(At(kCoreBoundsAlignedXBuffers, b), At(kCoreBoundsAlignedXBuffers, kBuffers + b));
        structure_ = At(kStructure, 0);
        for (int64_t l = 1; l < 4; ++l) structure_ = std::min(structure_, At(kStructure, l));
    }

    /** A pair's block class, core-boundary alignment (1: every core's copies start aligned) and structure:
     *  their factors' product (RangeKnown::pairFactor). */
    double PairFactor(int64_t blockClass, bool aligned, int64_t structure) const {
        return At(kBlockClass, blockClass) * At(kCoreBoundsAlignedXBuffers, (aligned ? 1 : 0) * kBuffers + buffers_) *
               At(kStructure, structure);
    }

    /** Under every configuration of the range: what the cores and the pair set, times the least of the rest. */
    double Loose(const RangeKnown& r) const { return Fixed(r) * tileSet_ * (1.0 - 1e-12); }

    /** Under every configuration of a width's range (r.elems: its widest core's elements), tile by tile: each
     *  tile's page place, size class, tile count and last copy at their own levels. Its cost grows with the
     *  range's tiles (hundreds at most, each a few table reads). */
    double Exact(const RangeKnown& r) const {
        const int64_t b = buffers_;
        const int64_t e = r.elems, se = r.stepElems, bytes = e * (kPageStepBytes / se);
        double least = INFINITY;
        for (int64_t ti = r.tiLo; ti <= r.tiHi;) {  // one tile count at a time
            const int64_t t = (e + ti * se - 1) / (ti * se);
            const int64_t last = t == 1 ? r.tiHi : std::min(r.tiHi, (e - 1) / ((t - 1) * se));
            const int64_t bin = TilesBin(t);
            double run = INFINITY;
            if (t == 1) {  // one tile: the last copy is the whole core at every tile, so the least page and size first
                double placed = INFINITY;
                while (ti <= last) {  // one size class at a time: a class of kPageSteps tiles or more holds every place
                    const int64_t level = TileSizeLevel(ti * kPageStepBytes);
                    const int64_t end = std::min(last, ((int64_t{2} << level) - 1) / kPageStepBytes);
                    double page = pageLeast_;
                    if (end - ti + 1 < kPageSteps) {
                        page = INFINITY;
                        for (int64_t j = ti; j <= end; ++j) page = std::min(page, page_[j % kPageSteps]);
                    }
                    placed = std::min(placed, page * size_[level]);
                    ti = end + 1;
                }
                run = placed * TailOf(TailLevel(bytes), bin);  // (rounding is monotone: the least product's)
            }
            for (; ti <= last; ++ti) {
                const int64_t tail = bytes - (t - 1) * ti * kPageStepBytes;  // the widest core's last copy
                run = std::min(run, page_[ti % kPageSteps] * size_[TileSizeLevel(ti * kPageStepBytes)] * TailOf(TailLevel(tail), bin));
            }
            least = std::min(least, run * At(kTilesXBuffers, bin * kBuffers + b));
        }
        return Fixed(r) * least * (1.0 - 1e-12);
    }

    /** The tile's place in the page's part of a factor (its alignment and page step), and its size class's. */
    double Page(int64_t ti) const { return page_[ti % kPageSteps]; }
    double Size(int64_t level) const { return size_[level]; }

private:
    double At(int feature, int64_t level) const { return t_[kOffsets.at[feature] + level]; }
    /** The last copy's alignment level a with tiles bin t: its two factors. */
    double TailOf(int64_t a, int64_t t) const { return At(kTailAlign, a) * At(kTailAlignXTiles, a * kTilesLevels + t); }
    /** The factors the cores and the pairs set (the least where a range's pairs are not known). */
    double Fixed(const RangeKnown& r) const {
        const int64_t b = buffers_;
        const double pair = r.pairFactor > 0.0 ? r.pairFactor
                                               : (r.blockFactor > 0.0 ? r.blockFactor : block_) * bounds_ * structure_;
        return At(kBufferNum, b) * At(kCores, Clamp(r.cores, 0, 64)) * At(kCoresOddXBuffers, (r.cores % 2) * kBuffers + b) *
               pair;
    }

    const double* t_ = nullptr;
    int64_t buffers_ = 0;
    double block_ = 1.0, bounds_ = 1.0, structure_ = 1.0;
    double tileSet_ = 1.0;  // the least of page_ times the least of size_ times the least tiles-and-last-copy factor
    double pageLeast_ = 1.0;  // the least of page_
    // Filled by Set (left uninitialised before: a search that has no residual never reads them).
    double page_[kPageSteps];
    double size_[kTileSizeClasses];
};

}  // namespace residual
}  // namespace bce_grad

#endif  // BCE_GRAD_RESIDUAL_H
