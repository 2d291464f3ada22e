/**
 * The realised-tiling classes a device's learned residual prices (tiling_model/residual.py fits one log
 * factor per level): what the knobs make of a size, each feature a small table of levels, and a SoC's factor
 * table over them (SocModel::residualFactor: one factor per level, features in Feature order). One source:
 * Python reads the levels through the engine binding (_engine.residual_levels); the engine's prediction
 * (cost::PredictConfig), its re-fit's floors (RangeFloor) and the exported header's TunedTiling price them here.
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
constexpr int kTilesBins = 20;        // tiles per core: each count to 16, then to 24, 32, 48, 64
constexpr int kTilesLevels = kTilesBins + 1;
constexpr int64_t kTilesBinTop[kTilesBins] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 24, 32, 48, 64};

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
    kTileSizeClasses * kBuffers, 5, 5 * kTilesLevels, kTilesLevels * kBuffers, 2 * kBuffers, 4};

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
inline int64_t Log2Floor(int64_t v) {
    int64_t c = 0;
    while (v > 1) {
        v >>= 1;
        ++c;
    }
    return c;
}

/** The largest of grains[0..count) dividing bytes, as its index + 1 (0: none divides). */
inline int64_t AlignLevel(int64_t bytes, const int64_t* grains, int count) {
    int64_t level = 0;
    for (int i = 0; i < count; ++i) {
        if (bytes % grains[i] == 0) level = i + 1;
    }
    return level;
}

/** The tiles-per-core bin: each count to 16 its own, then 17-24, 25-32, 33-48, 49-64, more. */
inline int64_t TilesBin(int64_t tiles) {
    for (int i = 0; i < kTilesBins; ++i) {
        if (tiles <= kTilesBinTop[i]) return i;
    }
    return kTilesBins;
}

/** The tile's alignment level (its largest divisor of 1, 2, 4, 8 KiB, as its index + 1; 0: none). */
inline int64_t TileAlignLevel(int64_t tile) {
    static const int64_t kTileGrains[4] = {1024, 2048, 4096, 8192};
    return AlignLevel(tile, kTileGrains, 4);
}

/** The tile's size class: log2 of its bytes. */
inline int64_t TileSizeLevel(int64_t tile) { return Clamp(Log2Floor(tile), 0, kTileSizeClasses - 1); }

/** Every feature's level of one exact-scheme configuration whose kinds are k (cost::Kinds; elem bytes per
 *  element). */
template <class CoreKinds>
inline void LevelsOf(const CoreKinds& k, int64_t elem, int64_t block, int64_t bn, int64_t tile, int64_t* out) {
    static const int64_t kTailGrains[4] = {32, 512, 2048, 8192};
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
    const int64_t tailAlign = AlignLevel(tailBytes, kTailGrains, 4);
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

/** A configuration's factor: its levels' factors multiplied in Feature order (what every prediction carries). */
inline double FactorOf(const double* table, const int64_t* levels) {
    double f = 1.0;
    for (int i = 0; i < kFeatures; ++i) f *= table[OffsetOf(i) + levels[i]];
    return f;
}

/** What a search knows of a range of configurations of one BUFFER_NUM and core count: their tiles (tile
 *  indices of step bytes), the tiles per core of their widest core kind, and, where it knows them (else -1),
 *  the block class, whether every core's boundaries are aligned and the core kinds' structure. */
struct RangeKnown {
    int64_t bufferNum, cores;
    int64_t tiLo, tiHi, stepBytes;
    int64_t tilesLo, tilesHi;
    int64_t blockClass = -1, aligned = -1, structure = -1;
};

/** Under the factor of every configuration of a range (FactorOf), the least its levels can give: per group of
 *  features that vary together, the least product over the levels the range holds; each group's least is at
 *  or under the group's part of any configuration's product, and a relative 1e-12 covers the products'
 *  different order of rounding. */
inline double RangeFloor(const double* table, const RangeKnown& r) {
    const int64_t b = Clamp(r.bufferNum, 0, kBuffers - 1);
    const auto at = [table](int feature, int64_t level) { return table[OffsetOf(feature) + level]; };
    const auto least = [&at](int feature, int64_t known) {
        if (known >= 0) return at(feature, known);
        double m = at(feature, 0);
        for (int64_t l = 1; l < kLevels[feature]; ++l) m = std::min(m, at(feature, l));
        return m;
    };
    double f = at(kBufferNum, b) * least(kBlockClass, r.blockClass) * at(kCores, Clamp(r.cores, 0, 64)) *
               at(kCoresOddXBuffers, (r.cores % 2) * kBuffers + b);
    double tileF = INFINITY;  // alignment and place in the page: by the tile index modulo the page's steps
    const int64_t steps = std::min<int64_t>(r.tiHi - r.tiLo + 1, kPageSteps);
    for (int64_t ti = r.tiHi; ti > r.tiHi - steps; --ti) {
        const int64_t tile = ti * r.stepBytes, align = TileAlignLevel(tile);
        tileF = std::min(tileF, at(kTileAlign, align) * at(kTileAlignXBuffers, align * kBuffers + b) *
                                    at(kTileInPageXBuffers, ((tile % 8192) / 512) * kBuffers + b));
    }
    double sizeF = INFINITY;
    for (int64_t l = TileSizeLevel(r.tiLo * r.stepBytes); l <= TileSizeLevel(r.tiHi * r.stepBytes); ++l) {
        sizeF = std::min(sizeF, at(kTileSize, l) * at(kTileSizeXBuffers, l * kBuffers + b));
    }
    double tilesF = INFINITY;  // tiles per core, with the last copy's alignment at any level
    for (int64_t t = TilesBin(r.tilesLo); t <= TilesBin(r.tilesHi); ++t) {
        double tail = INFINITY;
        for (int64_t a = 0; a < 5; ++a) tail = std::min(tail, at(kTailAlign, a) * at(kTailAlignXTiles, a * kTilesLevels + t));
        tilesF = std::min(tilesF, tail * at(kTilesXBuffers, t * kBuffers + b));
    }
    const double bounds = r.aligned >= 0 ? at(kCoreBoundsAlignedXBuffers, r.aligned * kBuffers + b)
                                         : std::min(at(kCoreBoundsAlignedXBuffers, b),
                                                    at(kCoreBoundsAlignedXBuffers, kBuffers + b));
    f = f * tileF * sizeF * tilesF * bounds * least(kStructure, r.structure);
    return f * (1.0 - 1e-12);
}

}  // namespace residual
}  // namespace bce_grad

#endif  // BCE_GRAD_RESIDUAL_H
