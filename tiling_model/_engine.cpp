// Python binding of the cost model's engine (tiling_model/include/bce_grad_cost_model.h and its re-fit,
// bce_grad_refit.h): the same headers the CANN build compiles, so what the service, the tuner and the explorer
// compute is what the build computes.
//
// The header's structs point at their arrays (the build keeps them in generated constexpr tables); here a
// Soc and a Kernel own theirs and hand the header a model that points into them. Everything is named:
// Python builds a Soc or a Kernel by keyword (tiling_model/engine.py fills them from a SocProfile and an
// ElementwiseKernel), never from positional arrays.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bce_grad_cost_model.h"
#include "bce_grad_refit.h"
#include "bce_grad_residual.h"
#include "bce_grad_tiling_core.h"

namespace nb = nanobind;
namespace cost = bce_grad::cost;
namespace residual = bce_grad::residual;

namespace {

using Points = std::vector<std::pair<double, double>>;  // (KiB, us) as the SoC profiles list them

/** A DMA curve that owns its points: bytes and us, with simulate.curve's slope and fixed cost. */
struct OwnedCurve {
    std::vector<double> bytes, us;
    double slope = 0.0, fixed = 0.0;

    explicit OwnedCurve(const Points& points) {
        if (points.size() < 2) throw std::invalid_argument("a DMA curve needs at least two points");
        for (const auto& [kib, t] : points) {
            bytes.push_back(kib * 1024.0);
            us.push_back(t);
        }
        const size_t last = bytes.size() - 1;
        slope = (us[last] - us[last - 1]) / (bytes[last] - bytes[last - 1]);
        fixed = std::max(us[0] - bytes[0] * (us[1] - us[0]) / (bytes[1] - bytes[0]), 0.0);
    }
    cost::Curve View() const { return cost::Curve{bytes.data(), us.data(), static_cast<int>(us.size()), slope, fixed}; }
};

/** A SoC as the engine reads it, owning its curves, its knob correction and its residual. */
struct Soc {
    std::string name;
    OwnedCurve mte2, mte3;
    std::vector<double> blockFactor, bufferFactor, alignFactor, coreFactor;  // empty: no correction
    std::vector<double> residualFactor;                                      // empty: no residual
    cost::SocModel model{};

    Soc(std::string name_, int64_t aivCores, double launchUs, double coreStartUs, double vectorStartCycles,
        double vectorMhz, double misalignedFactor, double hbmGbps, double l2Gbps, double hbmPeakGbps,
        double l2PeakGbps, double l2HalfBytes, double l2Falloff, double l2Bytes, const Points& mte2Points,
        const Points& mte3Points, std::vector<double> blockFactors, std::vector<double> bufferFactors,
        std::vector<double> alignFactors, std::vector<double> coreFactors, std::vector<double> residualFactors)
        : name(std::move(name_)), mte2(mte2Points), mte3(mte3Points), blockFactor(std::move(blockFactors)),
          bufferFactor(std::move(bufferFactors)), alignFactor(std::move(alignFactors)),
          coreFactor(std::move(coreFactors)), residualFactor(std::move(residualFactors)) {
        if (aivCores < 1 || aivCores > cost::kMaxCores) throw std::invalid_argument("aiv_cores must be 1..64");
        const bool none = blockFactor.empty() && bufferFactor.empty() && alignFactor.empty() && coreFactor.empty();
        if (!none && (blockFactor.size() != cost::kBlockClasses || bufferFactor.size() != cost::kBufferClasses ||
                      alignFactor.size() != cost::kAlignClasses || coreFactor.size() != cost::kCoreClasses)) {
            throw std::invalid_argument("a knob correction needs 16 block, 5 buffer, 4 alignment and 65 core factors");
        }
        if (!residualFactor.empty() && residualFactor.size() != static_cast<size_t>(residual::kWidth)) {
            throw std::invalid_argument("a residual needs one factor per level of every feature (" +
                                        std::to_string(residual::kWidth) + ")");
        }
        for (const auto* v : {&blockFactor, &bufferFactor, &alignFactor, &coreFactor, &residualFactor}) {
            for (double f : *v) {
                if (!(f > 0.0) || !std::isfinite(f)) throw std::invalid_argument("knob and residual factors must be positive");
            }
        }
        model = cost::SocModel{nullptr, aivCores, 0, 0, launchUs, coreStartUs, vectorStartCycles, vectorMhz,
                               misalignedFactor, hbmGbps, l2Gbps, hbmPeakGbps, l2PeakGbps, l2HalfBytes, l2Falloff,
                               l2Bytes, mte2.View(), mte3.View()};
        model.name = name.c_str();
        if (!none) {
            model.blockFactor = blockFactor.data();
            model.bufferFactor = bufferFactor.data();
            model.alignFactor = alignFactor.data();
            model.coreFactor = coreFactor.data();
        }
        if (!residualFactor.empty()) model.residualFactor = residualFactor.data();
    }
    Soc(const Soc&) = delete;
    Soc& operator=(const Soc&) = delete;
};

/** An elementwise kernel as the engine reads it, owning its vector instructions. */
struct Kernel {
    std::vector<cost::VectorOp> ops;
    cost::KernelModel model{};

    Kernel(int64_t elemBytes, int64_t fullInputs, int64_t outputs, int64_t scalarInputs, int64_t rowBytes,
           const std::vector<std::pair<double, double>>& opList, int64_t workspaceInputs, int64_t rowInputs,
           int64_t rowLen, int64_t rowExpandBytes, int64_t scalarQueueBytes, bool corrected) {
        if (elemBytes < 1) throw std::invalid_argument("elem_bytes must be positive");
        if (rowInputs > 0 && rowLen < 1) throw std::invalid_argument("a rows operand needs row_len >= 1");
        for (const auto& [operandBytes, cycles] : opList) ops.push_back(cost::VectorOp{operandBytes, cycles});
        model = cost::KernelModel{elemBytes, fullInputs, outputs, scalarInputs, rowBytes, ops.data(),
                                  static_cast<int>(ops.size()), workspaceInputs, rowInputs, rowLen, rowExpandBytes,
                                  scalarQueueBytes, corrected};
    }
    Kernel(const Kernel&) = delete;
    Kernel& operator=(const Kernel&) = delete;
};

using Triple = std::tuple<int64_t, int64_t, int64_t>;
using Flags = std::tuple<bool, bool, bool>;
using Column = nb::ndarray<const int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using DoubleColumn = nb::ndarray<const double, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using Out1 = nb::ndarray<nb::numpy, double, nb::ndim<1>>;
using Out2 = nb::ndarray<nb::numpy, double, nb::ndim<2>>;
using OutB = nb::ndarray<nb::numpy, bool, nb::ndim<1>>;

cost::Kinds MakeKinds(const Triple& counts, const Triple& elems, const Triple& tiles, const Triple& tail,
                      const Flags& aligned, int64_t cores) {
    cost::Kinds k{};
    std::tie(k.counts[0], k.counts[1], k.counts[2]) = counts;
    std::tie(k.elems[0], k.elems[1], k.elems[2]) = elems;
    std::tie(k.tiles[0], k.tiles[1], k.tiles[2]) = tiles;
    std::tie(k.tail[0], k.tail[1], k.tail[2]) = tail;
    std::tie(k.aligned[0], k.aligned[1], k.aligned[2]) = aligned;
    k.cores = cores;
    return k;
}

constexpr size_t kStructFields = sizeof(BceGradTilingData) / sizeof(int64_t);
static_assert(sizeof(BceGradTilingData) == kStructFields * sizeof(int64_t), "the tiling struct is int64 fields only");
using StructFields = std::vector<int64_t>;  // BceGradTilingData's fields in declaration order

BceGradTilingData StructOf(const StructFields& fields) {
    if (fields.size() != kStructFields) throw std::invalid_argument("the tiling struct has 17 fields");
    BceGradTilingData f;
    std::memcpy(&f, fields.data(), sizeof f);
    return f;
}

StructFields FieldsOf(const BceGradTilingData& f) {
    StructFields out(kStructFields);
    std::memcpy(out.data(), &f, sizeof f);
    return out;
}

/** The struct of one tiling from resolved knobs (the host tiling's ExactFields / SeedFields). */
std::pair<StructFields, int64_t> TilingFields(const std::string& scheme, int64_t n, int64_t elem, int64_t block,
                                              int64_t tile, int64_t coreNum, int64_t reduction, int64_t classes,
                                              int64_t period, int64_t key) {
    if (n < 0 || elem < 1 || block < elem || tile < elem || coreNum < 1) {
        throw std::invalid_argument("n >= 0, and elem, block, tile and core_num >= 1 (block and tile >= elem)");
    }
    if (reduction < 0 || reduction > 2) throw std::invalid_argument("reduction is 0 (none), 1 (sum) or 2 (mean)");
    bce_grad::Knobs k;
    k.blockBytes = block;
    k.tileBytes = tile;
    k.coreNum = coreNum;
    bce_grad::StructExtras x;
    x.reduction = static_cast<bce_grad::Reduction>(reduction);
    x.classes = classes;
    x.period = period;
    x.tilingKey = key;
    BceGradTilingData f;
    int64_t blockDim;
    if (scheme == "exact") {
        blockDim = bce_grad::ExactFields(n, elem, k, x, &f);
    } else if (scheme == "seed") {
        blockDim = bce_grad::SeedFields(n, elem, k, x, &f);
    } else {
        throw std::invalid_argument("scheme is 'exact' or 'seed'");
    }
    return {FieldsOf(f), blockDim};
}

/** A C++ variant from the tiling key's digits (tiling_model Variant.ids). */
bce_grad::Variant VariantOf(int64_t dtype, int64_t reduction, int64_t weight, int64_t posWeight, int64_t wrt,
                            int64_t mode) {
    if (dtype < 0 || dtype > 4 || reduction < 0 || reduction > 2 || weight < 0 || weight > 4 || posWeight < 0 ||
        posWeight > 4 || wrt < 0 || wrt > 1 || mode < 0 || mode > 1) {
        throw std::invalid_argument("dtype 0-4, reduction 0-2, weight and pos_weight 0-4, wrt 0-1, mode 0-1");
    }
    bce_grad::Variant v;
    v.dtype = static_cast<bce_grad::Dtype>(dtype);
    v.reduction = static_cast<bce_grad::Reduction>(reduction);
    v.weight = static_cast<bce_grad::Form>(weight);
    v.posWeight = static_cast<bce_grad::Form>(posWeight);
    v.wrt = static_cast<bce_grad::Wrt>(wrt);
    v.mode = static_cast<bce_grad::Mode>(mode);
    return v;
}

using Run = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;

/** The struct as the kernel reads it: (first core, cores, first element, elements, tiles, last tile's) for the
 *  big, the small and the last cores (bce_grad_core_split.h RunsOf; tiles as the struct gives them). */
std::vector<Run> CoreRuns(const StructFields& fields, int64_t blockDim) {
    const BceGradTilingData f = StructOf(fields);
    bce_grad::CoreRun runs[3];
    bce_grad::RunsOf(bce_grad::SplitOf(f, blockDim), runs);
    const int64_t tiles[3] = {f.finalBigTileNum, f.finalSmallTileNum, f.lastCoreTileNum};
    const int64_t tails[3] = {f.bigTailDataNum, f.smallTailDataNum, f.lastCoreTailDataNum};
    std::vector<Run> out;
    for (int i = 0; i < 3; ++i) {
        const bool any = runs[i].cores > 0;
        out.emplace_back(runs[i].first, runs[i].cores, runs[i].start, runs[i].count, any ? tiles[i] : 0,
                         any ? tails[i] : 0);
    }
    return out;
}

template <typename T>
nb::ndarray<nb::numpy, T, nb::ndim<1>> Vector1(size_t m) {
    T* data = new T[m]();
    nb::capsule owner(data, [](void* p) noexcept { delete[] static_cast<T*>(p); });
    return nb::ndarray<nb::numpy, T, nb::ndim<1>>(data, {m}, owner);
}

Out2 Matrix3(size_t m) {
    double* data = new double[m * 3]();
    nb::capsule owner(data, [](void* p) noexcept { delete[] static_cast<double*>(p); });
    return Out2(data, {m, 3}, owner);
}

/** Each configuration of parallel knob columns at n elements through Evaluate (exact: simulated; else
 *  bounded only), with the GIL released: fn(row, prediction). */
template <typename Fn>
void EachConfig(int64_t n, const Column& block, const Column& bn, const Column& tile, const Column& cores,
                const Kernel& k, const Soc& s, double hit, bool exact, Fn&& fn) {
    const size_t m = block.shape(0);
    if (bn.shape(0) != m || tile.shape(0) != m || cores.shape(0) != m) {
        throw std::invalid_argument("block, buffer_num, tile and cores must have the same length");
    }
    nb::gil_scoped_release unlocked;
    for (size_t i = 0; i < m; ++i) {
        fn(i, cost::PredictConfig(n, block(i), bn(i), tile(i), cores(i), k.model, s.model, hit, exact));
    }
}

/** Every configuration of a space at n elements, simulated: simulate.BatchResult's columns. */
/** A re-fit's arguments checked, and its blocks in the descending, distinct order it searches them. */
std::vector<int64_t> RefitBlocks(const std::vector<int64_t>& blocks, int64_t bn, const Kernel& k) {
    if (blocks.size() > static_cast<size_t>(cost::kMaxBlocks)) throw std::invalid_argument("too many block sizes");
    if (bn < 1) throw std::invalid_argument("buffer_num must be >= 1");
    if (k.model.scalarQueueBytes > 0) throw std::invalid_argument("the re-fit is for exact-scheme kernels");
    std::vector<int64_t> order(blocks);
    std::sort(order.begin(), order.end(), [](int64_t a, int64_t b) { return a > b; });
    order.erase(std::unique(order.begin(), order.end()), order.end());
    return order;
}

nb::tuple Score(int64_t n, const Column& block, const Column& bn, const Column& tile, const Column& cores,
                const Kernel& k, const Soc& s, double hit) {
    const size_t m = block.shape(0);
    Out1 us = Vector1<double>(m), core = Vector1<double>(m), bandwidth = Vector1<double>(m);
    Out1 bytes = Vector1<double>(m), roofline = Vector1<double>(m);
    Out2 busy = Matrix3(m);
    EachConfig(n, block, bn, tile, cores, k, s, hit, true, [&](size_t i, const cost::Prediction& p) {
        us.data()[i] = p.us;
        core.data()[i] = p.coreUs;
        bandwidth.data()[i] = p.bandwidthUs;
        std::copy(p.busy, p.busy + 3, busy.data() + 3 * i);
        bytes.data()[i] = p.bytesMoved;
        roofline.data()[i] = p.rooflineUs;
    });
    return nb::make_tuple(us, core, bandwidth, busy, bytes, roofline);
}

/** Many sizes' configurations under one SoC in one call: group g (ns[g] elements of kernels[g] in states[g]) holds
 *  rows [starts[g], starts[g + 1]) of the knob columns; each row's prediction (Score's first column), the GIL
 *  released. A device fit predicts its cases (a few per size, hundreds of sizes) under each trial profile: one
 *  call per size had cost more in the crossing than in the engine. */
Out1 ScoreGroups(const Column& ns, const nb::list& kernels, const nb::list& states, const Column& starts,
                 const Column& block, const Column& bn, const Column& tile, const Column& cores, const Soc& s) {
    const size_t groups = ns.shape(0), m = block.shape(0);
    if (nb::len(kernels) != groups || nb::len(states) != groups || starts.shape(0) != groups + 1) {
        throw std::invalid_argument("one kernel and one L2 state per size, and one more start than sizes");
    }
    if (bn.shape(0) != m || tile.shape(0) != m || cores.shape(0) != m) {
        throw std::invalid_argument("block, buffer_num, tile and cores must have the same length");
    }
    if (starts(0) != 0 || starts(groups) != static_cast<int64_t>(m)) {
        throw std::invalid_argument("starts must run from 0 to the number of configurations");
    }
    std::vector<const cost::KernelModel*> models(groups);
    std::vector<cost::L2State> l2(groups);
    for (size_t g = 0; g < groups; ++g) {
        if (starts(g + 1) < starts(g)) throw std::invalid_argument("starts must not decrease");
        models[g] = &nb::cast<const Kernel&>(kernels[g]).model;
        l2[g] = nb::cast<cost::L2State>(states[g]);
    }
    Out1 us = Vector1<double>(m);
    nb::gil_scoped_release unlocked;
    for (size_t g = 0; g < groups; ++g) {
        const double hit = cost::L2Hit(*models[g], s.model, ns(g), l2[g]);
        for (int64_t i = starts(g); i < starts(g + 1); ++i) {
            us.data()[i] = cost::PredictConfig(ns(g), block(i), bn(i), tile(i), cores(i), *models[g], s.model, hit, true).us;
        }
    }
    return us;
}

/** Every configuration's lower bound and whether it is the prediction (simulate.bounds_us), no schedule. */
nb::tuple Bound(int64_t n, const Column& block, const Column& bn, const Column& tile, const Column& cores,
                const Kernel& k, const Soc& s, double hit) {
    const size_t m = block.shape(0);
    Out1 lower = Vector1<double>(m);
    OutB certain = Vector1<bool>(m);
    EachConfig(n, block, bn, tile, cores, k, s, hit, false, [&](size_t i, const cost::Prediction& p) {
        lower.data()[i] = p.lower;
        certain.data()[i] = p.certain;
    });
    return nb::make_tuple(lower, certain);
}

/** The first configuration in the space's order (cost::ConfigBefore), -1 for none. */
int64_t BestIndex(const DoubleColumn& us, const Column& block, const Column& bn, const Column& tile, const Column& cores) {
    const size_t m = us.shape(0);
    if (block.shape(0) != m || bn.shape(0) != m || tile.shape(0) != m || cores.shape(0) != m) {
        throw std::invalid_argument("predicted_us, block, buffer_num, tile and cores must have the same length");
    }
    int64_t best = -1;
    cost::ConfigKey bestKey{};
    for (size_t i = 0; i < m; ++i) {
        const cost::ConfigKey k{cost::TieKey(us(i)), bn(i), tile(i), cores(i), block(i)};
        if (best < 0 || cost::ConfigBefore(k, bestKey)) {
            best = static_cast<int64_t>(i);
            bestKey = k;
        }
    }
    return best;
}

}  // namespace

NB_MODULE(_engine, m) {
    m.doc() = "The cost model's engine (tiling_model/include/bce_grad_cost_model.h), bound for Python.";
    m.attr("WARMUP") = cost::kWarmup;
    m.attr("PERIOD") = cost::kPeriod;
    m.attr("REPEAT_BYTES") = cost::kRepeatBytes;
    m.attr("GM_ALIGN_BYTES") = cost::kGmAlignBytes;
    m.attr("TILE_STEP_BYTES") = cost::kTileStepBytes;
    m.attr("BOUND_SLACK") = cost::kBoundSlack;
    m.attr("PRUNE_MARGIN_US") = cost::kPruneMarginUs;
    m.attr("PRUNE_RELATIVE") = cost::kPruneRelative;
    m.attr("TIE_SCALE") = cost::kTieScale;
    m.attr("DUP_CYCLES") = cost::kDupCycles;
    m.attr("MAX_CORES") = cost::kMaxCores;
    m.attr("MAX_BLOCKS") = cost::kMaxBlocks;
    m.attr("MAX_TILES") = cost::kMaxTiles;
    m.attr("BLOCK_CLASSES") = cost::kBlockClasses;
    m.attr("BUFFER_CLASSES") = cost::kBufferClasses;
    m.attr("ALIGN_CLASSES") = cost::kAlignClasses;
    m.attr("CORE_CLASSES") = cost::kCoreClasses;
    m.attr("MAX_BUFFERS_PER_POSITION") = cost::kMaxBuffersPerPosition;
    m.attr("SEED_SCALAR_QUEUE_ELEMS") = bce_grad::kSeedScalarQueueElems;
    m.attr("SEED_BLOCK_BYTES") = bce_grad::kSeedBlockBytes;
    m.attr("LAST_DIM_STAGE_ELEMS") = bce_grad::kLastDimStageElems;
    m.attr("LAST_DIM_SUPER_ELEMS") = bce_grad::kLastDimSuperElems;

    nb::class_<Soc>(m, "Soc", "A SoC profile's model numbers (the engine's SocModel), owning its DMA curves.")
        .def(nb::init<std::string, int64_t, double, double, double, double, double, double, double, double, double,
                      double, double, double, const Points&, const Points&, std::vector<double>, std::vector<double>,
                      std::vector<double>, std::vector<double>, std::vector<double>>(),
             nb::kw_only(), nb::arg("name"), nb::arg("aiv_cores"), nb::arg("launch_us"), nb::arg("core_start_us"),
             nb::arg("vector_start_cycles"), nb::arg("vector_mhz"), nb::arg("misaligned_factor"), nb::arg("hbm_gbps"),
             nb::arg("l2_gbps"), nb::arg("hbm_peak_gbps"), nb::arg("l2_peak_gbps"), nb::arg("l2_half_bytes"),
             nb::arg("l2_falloff"), nb::arg("l2_bytes"), nb::arg("mte2_curve_kib_us"), nb::arg("mte3_curve_kib_us"),
             nb::arg("block_factors") = std::vector<double>{}, nb::arg("buffer_factors") = std::vector<double>{},
             nb::arg("align_factors") = std::vector<double>{}, nb::arg("core_factors") = std::vector<double>{},
             nb::arg("residual_factors") = std::vector<double>{})
        .def_ro("name", &Soc::name)
        .def_prop_ro("learned", [](const Soc& s) { return cost::Learned(s.model); },
                     "Whether it carries a device's knob correction or residual (cost::Learned): a re-fit then "
                     "searches every buffer count.")
        .def_prop_ro("aiv_cores", [](const Soc& s) { return s.model.aivCores; })
        .def_prop_ro("mte2_tail", [](const Soc& s) { return std::make_pair(s.mte2.slope, s.mte2.fixed); },
                     "(slope in us per byte past the last point, fixed cost at 0 bytes)")
        .def_prop_ro("mte3_tail", [](const Soc& s) { return std::make_pair(s.mte3.slope, s.mte3.fixed); });

    nb::class_<Kernel>(m, "Kernel", "An elementwise kernel's streams and instructions (the engine's KernelModel).")
        .def(nb::init<int64_t, int64_t, int64_t, int64_t, int64_t, const std::vector<std::pair<double, double>>&,
                      int64_t, int64_t, int64_t, int64_t, int64_t, bool>(),
             nb::kw_only(), nb::arg("elem_bytes"), nb::arg("full_inputs"), nb::arg("outputs"),
             nb::arg("scalar_inputs"), nb::arg("row_bytes"), nb::arg("ops"), nb::arg("workspace_inputs"),
             nb::arg("row_inputs"), nb::arg("row_len"), nb::arg("row_expand_bytes"), nb::arg("scalar_queue_bytes"),
             nb::arg("corrected") = false)
        .def_prop_ro("elem_bytes", [](const Kernel& k) { return k.model.elemBytes; });

    nb::class_<cost::Kinds>(m, "Kinds", "The three kinds of core of a tiling (big, small, last).")
        .def("__init__",
             [](cost::Kinds* self, const Triple& counts, const Triple& elems, const Triple& tiles, const Triple& tail,
                const Flags& aligned, int64_t cores) { new (self) cost::Kinds(MakeKinds(counts, elems, tiles, tail, aligned, cores)); },
             nb::kw_only(), nb::arg("counts"), nb::arg("elems"), nb::arg("tiles"), nb::arg("tail"), nb::arg("aligned"),
             nb::arg("cores"))
        .def_prop_ro("counts", [](const cost::Kinds& k) { return Triple(k.counts[0], k.counts[1], k.counts[2]); })
        .def_prop_ro("elems", [](const cost::Kinds& k) { return Triple(k.elems[0], k.elems[1], k.elems[2]); })
        .def_prop_ro("tiles", [](const cost::Kinds& k) { return Triple(k.tiles[0], k.tiles[1], k.tiles[2]); })
        .def_prop_ro("tail", [](const cost::Kinds& k) { return Triple(k.tail[0], k.tail[1], k.tail[2]); })
        .def_prop_ro("aligned", [](const cost::Kinds& k) { return Flags(k.aligned[0], k.aligned[1], k.aligned[2]); })
        .def_ro("cores", &cost::Kinds::cores);

    nb::class_<cost::L2State> l2(m, "L2State", "The L2 state a prediction assumes (simulate.L2State).");
    nb::enum_<cost::L2State::Kind>(l2, "Kind")
        .value("STEADY", cost::L2State::Steady)
        .value("COLD", cost::L2State::Cold)
        .value("WARM", cost::L2State::Warm)
        .value("CURVE", cost::L2State::Curve);
    l2.def("__init__",
           [](cost::L2State* self, cost::L2State::Kind kind, double halfBytes, double falloff, double l2Bytes) {
               new (self) cost::L2State{kind, halfBytes, falloff, l2Bytes};
           },
           nb::arg("kind"), nb::kw_only(), nb::arg("half_bytes") = 0.0, nb::arg("falloff") = 0.0,
           nb::arg("l2_bytes") = 0.0)
        .def_ro("kind", &cost::L2State::kind);

    nb::class_<cost::Prediction>(m, "Prediction", "One tiling's prediction and where its time goes.")
        .def_ro("us", &cost::Prediction::us)
        .def_ro("lower", &cost::Prediction::lower)
        .def_ro("certain", &cost::Prediction::certain)
        .def_ro("core_us", &cost::Prediction::coreUs)
        .def_ro("bandwidth_us", &cost::Prediction::bandwidthUs)
        .def_prop_ro("busy_us", [](const cost::Prediction& p) { return std::make_tuple(p.busy[0], p.busy[1], p.busy[2]); })
        .def_ro("bytes_moved", &cost::Prediction::bytesMoved)
        .def_ro("roofline_us", &cost::Prediction::rooflineUs);

    nb::class_<cost::RefitChoice>(m, "RefitChoice", "A re-fit's pick: block_bytes -1 when no tile fits.")
        .def_ro("block_bytes", &cost::RefitChoice::blockBytes)
        .def_ro("tile_bytes", &cost::RefitChoice::tileBytes)
        .def_ro("core_num", &cost::RefitChoice::coreNum)
        .def_ro("us", &cost::RefitChoice::us);

    m.def("l2_hit", [](const Kernel& k, const Soc& s, int64_t n, const cost::L2State& st) { return cost::L2Hit(k.model, s.model, n, st); },
          nb::arg("kernel"), nb::arg("soc"), nb::arg("n"), nb::arg("l2"),
          "The share of a launch's traffic over n elements that hits L2 (simulate.l2_hit).");
    m.def("evaluate",
          [](const cost::Kinds& kd, int64_t tileElems, int64_t bn, const Kernel& k, const Soc& s, double hit, bool exact) {
              if (tileElems < 1 || bn < 1) throw std::invalid_argument("tile_elems and buffer_num must be >= 1");
              return cost::Evaluate(kd, tileElems, bn, k.model, s.model, exact, -1.0, hit);
          },
          nb::arg("kinds"), nb::arg("tile_elems"), nb::arg("buffer_num"), nb::arg("kernel"), nb::arg("soc"),
          nb::arg("hit"), nb::arg("exact") = true, "One tiling's prediction from its core kinds (simulate.simulate's row).");
    m.def("score", &Score, nb::arg("n"), nb::arg("block_bytes"), nb::arg("buffer_num"), nb::arg("tile_bytes"),
          nb::arg("core_num"), nb::arg("kernel"), nb::arg("soc"), nb::arg("hit"),
          "Every configuration simulated: (predicted, core, bandwidth, busy (m, 3), bytes moved, roofline) arrays.");
    m.def("score_groups", &ScoreGroups, nb::arg("ns"), nb::arg("kernels"), nb::arg("states"), nb::arg("starts"),
          nb::arg("block_bytes"), nb::arg("buffer_num"), nb::arg("tile_bytes"), nb::arg("core_num"), nb::arg("soc"),
          "Many sizes' configurations, each size's rows from starts[g] to starts[g + 1]: every one's prediction.");
    m.def("bound", &Bound, nb::arg("n"), nb::arg("block_bytes"), nb::arg("buffer_num"), nb::arg("tile_bytes"),
          nb::arg("core_num"), nb::arg("kernel"), nb::arg("soc"), nb::arg("hit"),
          "Every configuration's lower bound and whether it is the prediction (no schedule).");
    m.def("refit",
          [](int64_t n, const std::vector<int64_t>& blocks, int64_t bn, int64_t tileTop, int64_t maxCores,
             const Kernel& k, const Soc& s, int64_t seedBlock, int64_t seedTile, int64_t seedCores) {
              const std::vector<int64_t> order = RefitBlocks(blocks, bn, k);
              nb::gil_scoped_release unlocked;
              return cost::Refit(n, order.data(), static_cast<int>(order.size()), bn, tileTop, maxCores, k.model,
                                 s.model, seedBlock, seedTile, seedCores);
          },
          nb::arg("n"), nb::arg("blocks"), nb::arg("buffer_num"), nb::arg("tile_top"), nb::arg("max_cores"),
          nb::arg("kernel"), nb::arg("soc"), nb::kw_only(), nb::arg("seed_block") = 0, nb::arg("seed_tile") = 0,
          nb::arg("seed_cores") = 0,
          "The fastest (block, tile, cores) of one BUFFER_NUM at n elements, cold L2, with the knob correction.");
    m.def("refit_across",
          [](int64_t n, const std::vector<int64_t>& blocks, const std::vector<std::pair<int64_t, int64_t>>& slices,
             int64_t maxCores, const Kernel& k, const Soc& s, int64_t seedBlock, int64_t seedTile, int64_t seedCores) {
              if (slices.size() > std::size(cost::kBufferChoices)) throw std::invalid_argument("too many buffer counts");
              std::vector<cost::RefitSlice> parts;
              for (const auto& [bn, top] : slices) {
                  if (bn < 1) throw std::invalid_argument("buffer_num must be >= 1");
                  parts.push_back(cost::RefitSlice{bn, top});
              }
              const std::vector<int64_t> order = RefitBlocks(blocks, 1, k);
              nb::gil_scoped_release unlocked;
              const cost::RefitPick p = cost::RefitAcross(n, order.data(), static_cast<int>(order.size()), parts.data(),
                                                          static_cast<int>(parts.size()), maxCores, k.model, s.model,
                                                          seedBlock, seedTile, seedCores);
              return std::make_tuple(p.choice.blockBytes, p.bufferNum, p.choice.tileBytes, p.choice.coreNum);
          },
          nb::arg("n"), nb::arg("blocks"), nb::arg("slices"), nb::arg("max_cores"), nb::arg("kernel"), nb::arg("soc"),
          nb::kw_only(), nb::arg("seed_block") = 0, nb::arg("seed_tile") = 0, nb::arg("seed_cores") = 0,
          "The fastest (block, buffer_num, tile, cores) over slices of (buffer_num, tile_top), in the space's order, "
          "the slices searched from the one where the seed's chain bound is least, each bounded by those before it "
          "(cost::RefitAcross); buffer_num -1 when no tile fits any.");
    m.def("refit_stats",
          [](int64_t n, const std::vector<int64_t>& blocks, int64_t bn, int64_t tileTop, int64_t maxCores,
             const Kernel& k, const Soc& s) {
              const std::vector<int64_t> order = RefitBlocks(blocks, bn, k);
              cost::RefitStats st;
              cost::Refit(n, order.data(), static_cast<int>(order.size()), bn, tileTop, maxCores, k.model, s.model, 0,
                          0, 0, &st);
              return std::map<std::string, int64_t>{{"ranges", st.ranges}, {"pairs", st.pairs}, {"configs", st.configs},
                                                    {"bounded", st.bounded}, {"simulated", st.simulated},
                                                    {"peak_queue", st.peakQueue}};
          },
          nb::arg("n"), nb::arg("blocks"), nb::arg("buffer_num"), nb::arg("tile_top"), nb::arg("max_cores"),
          nb::arg("kernel"), nb::arg("soc"),
          "What one unseeded re-fit did (cost::RefitStats): ranges bounded, pairs opened, configurations looked at, "
          "their chain bounds and simulations, the queue's peak.");
    m.def("pipelines",
          [](const cost::Kinds& kd, int64_t tileElems, int64_t bn, const Kernel& k, const Soc& s, double hit) {
              if (tileElems < 1 || bn < 1) throw std::invalid_argument("tile_elems and buffer_num must be >= 1");
              using StageT = std::tuple<double, double, double>;
              std::vector<std::tuple<StageT, StageT, double>> kinds;
              double rowUs = 0.0;
              for (int i = 0; i < 3; ++i) {
                  const cost::KindPipeline p = cost::PipelineOf(kd, i, tileElems, bn, k.model, s.model, hit, &rowUs);
                  kinds.emplace_back(StageT(p.full.in, p.full.vec, p.full.out), StageT(p.tail.in, p.tail.vec, p.tail.out),
                                     p.endUs);
              }
              return std::make_pair(kinds, rowUs);
          },
          nb::arg("kinds"), nb::arg("tile_elems"), nb::arg("buffer_num"), nb::arg("kernel"), nb::arg("soc"), nb::arg("hit"),
          "Per core kind (big, small, last): (full tile's stages, last tile's stages, pipeline end), and the row copy's us.");
    m.def("knob_factor",
          [](const Soc& s, const Kernel& k, int64_t block, int64_t bn, int64_t tile, int64_t cores) {
              return cost::KnobFactor(s.model, k.model, block, bn, tile, cores);
          },
          nb::arg("soc"), nb::arg("kernel"), nb::arg("block_bytes"), nb::arg("buffer_num"), nb::arg("tile_bytes"),
          nb::arg("cores"),
          "The SoC's knob correction of one configuration (1 without one, or for another kernel).");
    m.def("config_factor",
          [](const Soc& s, const Kernel& k, const cost::Kinds& kd, int64_t block, int64_t bn, int64_t tile) {
              if (block < 1 || tile < 1) throw std::invalid_argument("block_bytes and tile_bytes must be >= 1");
              return cost::ConfigFactor(s.model, k.model, kd, block, bn, tile);
          },
          nb::arg("soc"), nb::arg("kernel"), nb::arg("kinds"), nb::arg("block_bytes"), nb::arg("buffer_num"),
          nb::arg("tile_bytes"),
          "What an exact-scheme configuration's prediction is multiplied by: its knob correction times its residual.");
    m.attr("RESIDUAL_WIDTH") = residual::kWidth;
    nb::class_<bce_grad::BufferPlan>(m, "BufferPlan", "A kernel's UB plan: what InitBuffer asks for (bce_grad_tiling_core.h).")
        .def("__init__",
             [](bce_grad::BufferPlan* self, int64_t fullInputs, int64_t outputs, int64_t elem, int64_t tempBytesPerElem,
                int64_t scalarQueueBytes, int64_t rowBytes, int64_t tempBuffers, int64_t sumBytes) {
                 if (elem < 1 || fullInputs < 0 || outputs < 0 || tempBytesPerElem < 0 || scalarQueueBytes < 0 ||
                     rowBytes < 0 || tempBuffers < 0 || sumBytes < 0) {
                     throw std::invalid_argument("a buffer plan's sizes are >= 0 (elem_bytes >= 1)");
                 }
                 new (self) bce_grad::BufferPlan{fullInputs, outputs, elem, tempBytesPerElem, scalarQueueBytes,
                                                 rowBytes, tempBuffers, 0u, sumBytes};
             },
             nb::kw_only(), nb::arg("full_inputs"), nb::arg("outputs"), nb::arg("elem_bytes"),
             nb::arg("temp_bytes_per_elem"), nb::arg("scalar_queue_bytes"), nb::arg("row_bytes"), nb::arg("temp_buffers"),
             nb::arg("sum_bytes") = 0)
        .def_ro("full_inputs", &bce_grad::BufferPlan::fullInputs)
        .def_ro("outputs", &bce_grad::BufferPlan::outputs)
        .def_ro("elem_bytes", &bce_grad::BufferPlan::elemBytes)
        .def_ro("temp_bytes_per_elem", &bce_grad::BufferPlan::tempBytesPerElem)
        .def_ro("scalar_queue_bytes", &bce_grad::BufferPlan::scalarQueueBytes)
        .def_ro("row_bytes", &bce_grad::BufferPlan::rowBytes)
        .def_ro("temp_buffers", &bce_grad::BufferPlan::tempBuffers)
        .def_ro("input_mask", &bce_grad::BufferPlan::inputMask)
        .def_ro("sum_bytes", &bce_grad::BufferPlan::sumBytes)
        .def_prop_ro("sum_buffer", &bce_grad::BufferPlan::SumBuffer)
        .def("queue_bytes", &bce_grad::BufferPlan::QueueBytes, nb::arg("tile_bytes"), "One queue buffer of a tile.")
        .def("temp_bytes", &bce_grad::BufferPlan::TempBytes, nb::arg("tile_bytes"), "One temporary TBuf of a tile.")
        .def_prop_ro("temp_count", &bce_grad::BufferPlan::TempCount)
        .def_prop_ro("scalar_queue_buffer", &bce_grad::BufferPlan::ScalarQueueBuffer)
        .def_prop_ro("row_buffer", &bce_grad::BufferPlan::RowBuffer)
        .def("ub_bytes", &bce_grad::BufferPlan::UbBytes, nb::arg("tile_bytes"), nb::arg("buffer_num"))
        .def("max_tile_bytes", &bce_grad::BufferPlan::MaxTileBytes, nb::arg("budget"), nb::arg("buffer_num"));
    m.def("bce_grad_plan",
          [](int64_t dtype, int64_t reduction, int64_t weight, int64_t posWeight, int64_t wrt, int64_t mode,
             const std::string& scheme) {
              if (scheme != "exact" && scheme != "seed") throw std::invalid_argument("scheme is 'exact' or 'seed'");
              const bce_grad::Variant v = VariantOf(dtype, reduction, weight, posWeight, wrt, mode);
              bce_grad::BufferPlan plan{};
              const char* err = "";
              const bce_grad::Scheme sc = scheme == "seed" ? bce_grad::Scheme::Seed : bce_grad::Scheme::Exact;
              if (bce_grad::MakePlan(v, sc, &plan, &err) != bce_grad::Status::Ok) throw std::invalid_argument(err);
              return plan;
          },
          nb::arg("dtype"), nb::arg("reduction"), nb::arg("weight"), nb::arg("pos_weight"), nb::arg("wrt"), nb::arg("mode"),
          nb::arg("scheme"),
          "The kernel's UB plan for a variant (ids as in the tiling key; mode 1 the fused loss); ValueError names why not.");
    m.attr("INPUT_BITS") = nb::make_tuple(nb::make_tuple("grad", static_cast<uint32_t>(bce_grad::kGrad)),
                                          nb::make_tuple("logits", static_cast<uint32_t>(bce_grad::kLogits)),
                                          nb::make_tuple("labels", static_cast<uint32_t>(bce_grad::kLabels)),
                                          nb::make_tuple("weight", static_cast<uint32_t>(bce_grad::kWeight)),
                                          nb::make_tuple("pos_weight", static_cast<uint32_t>(bce_grad::kPosWeight)));
    m.def("resolve_knobs",
          [](const bce_grad::BufferPlan& plan, int64_t ubBytes, int64_t ubReserveBytes, int64_t aivCores,
             const std::string& scheme, int64_t block, int64_t bn, int64_t tile, int64_t cores) {
              if (scheme != "exact" && scheme != "seed") throw std::invalid_argument("scheme is 'exact' or 'seed'");
              const bce_grad::Platform p{ubBytes, ubReserveBytes, aivCores};
              const bce_grad::Knobs in{block, bn, tile, cores};
              bce_grad::Knobs out;
              const char* err = "";
              const bce_grad::Scheme sc = scheme == "seed" ? bce_grad::Scheme::Seed : bce_grad::Scheme::Exact;
              if (bce_grad::ResolveKnobs(in, plan, p, sc, &out, &err) != bce_grad::Status::Ok) {
                  throw std::invalid_argument(err);
              }
              return std::make_tuple(out.blockBytes, out.bufferNum, out.tileBytes, out.coreNum);
          },
          nb::arg("plan"), nb::arg("ub_bytes"), nb::arg("ub_reserve_bytes"), nb::arg("aiv_cores"), nb::arg("scheme"),
          nb::arg("block_bytes"), nb::arg("buffer_num"), nb::arg("tile_bytes"), nb::arg("core_num"),
          "The host tiling's knobs with its defaults where a knob is 0 (bce_grad::ResolveKnobs): (block, buffers, "
          "tile, cores); ValueError names a knob the scheme cannot take.");
    m.def("tiling_key",
          [](int64_t dtype, int64_t reduction, int64_t weight, int64_t posWeight, int64_t wrt, int64_t mode,
             int64_t bufferNum) {
              return bce_grad::TilingKey(VariantOf(dtype, reduction, weight, posWeight, wrt, mode), bufferNum);
          },
          nb::arg("dtype"), nb::arg("reduction"), nb::arg("weight"), nb::arg("pos_weight"), nb::arg("wrt"),
          nb::arg("mode"), nb::arg("buffer_num"), "The decimal-digit key the kernel dispatches on (bce_grad::TilingKey).");
    m.def("workspace_bytes",
          [](const StructFields& fields, int64_t blockDim, int64_t elem, bool posWeightLastDim, bool weightLastDim) {
              return bce_grad::WorkspaceBytes(StructOf(fields), blockDim, elem, posWeightLastDim, weightLastDim);
          },
          nb::arg("fields"), nb::arg("block_dim"), nb::arg("elem_bytes"), nb::arg("pos_weight_last_dim"),
          nb::arg("weight_last_dim"), "GM workspace of the last-dim operands' periodic rows (bce_grad::WorkspaceBytes).");
    m.def("tiling_fields", &TilingFields, nb::arg("scheme"), nb::arg("n"), nb::arg("elem_bytes"), nb::arg("block_bytes"),
          nb::arg("tile_bytes"), nb::arg("core_num"), nb::arg("reduction"), nb::arg("classes"), nb::arg("weight_period"),
          nb::arg("tiling_key"),
          "(the struct's 17 fields, block dim) of one tiling from resolved knobs: the host tiling's own arithmetic.");
    m.def("core_runs", &CoreRuns, nb::arg("fields"), nb::arg("block_dim"),
          "The struct as the kernel reads it: (first core, cores, first element, elements, tiles, last tile's "
          "elements) of the big, small and last cores; a run with no core is all 0 but its first core.");
    m.def("kinds_of_struct",
          [](const StructFields& fields, int64_t blockDim, int64_t elem) {
              if (elem < 1) throw std::invalid_argument("elem_bytes must be positive");
              return cost::KindsOfData(StructOf(fields), blockDim, elem);
          },
          nb::arg("fields"), nb::arg("block_dim"), nb::arg("elem_bytes"), "A tiling's core kinds from its struct (any scheme).");
    m.def("kinds_of",
          [](int64_t n, int64_t elem, int64_t block, int64_t tile, int64_t coreNum) {
              if (n < 0 || elem < 1 || block < elem || tile < elem || coreNum < 1) {
                  throw std::invalid_argument("n >= 0, and elem, block, tile and core_num >= 1 (block and tile >= elem)");
              }
              return cost::KindsOf(n, elem, block, tile, coreNum);
          },
          nb::arg("n"), nb::arg("elem_bytes"), nb::arg("block_bytes"), nb::arg("tile_bytes"), nb::arg("core_num"),
          "The core kinds of the exact scheme's tiling with these knobs (cost::KindsOf).");
    m.def("vecin_queues", &cost::VecinQueues, nb::arg("full_inputs"), nb::arg("scalar_queue_bytes"),
          "VECIN queues of a kernel: its full inputs and a per-tile scalar queue (cost::VecinQueues).");
    m.def("queue_limit_allows", &cost::QueueLimitAllows, nb::arg("vecin_queues"), nb::arg("vecout_queues"),
          nb::arg("buffer_num"), "BUFFER_NUM buffers per queue fit the per-TPosition limit (cost::QueueLimitAllows).");
    m.def("best_index", &BestIndex, nb::arg("predicted_us"), nb::arg("block_bytes"), nb::arg("buffer_num"),
          nb::arg("tile_bytes"), nb::arg("core_num"),
          "The first configuration in the space's order (predictions rounded to 1e-9 us; then buffers >= 2, fewer "
          "buffers, larger tile, more cores, larger block): cost::ConfigBefore. -1 when there is none.");
    m.def("space_cores", &cost::SpaceCores, nb::arg("n"), nb::arg("elem_bytes"), nb::arg("block_bytes"),
          nb::arg("max_cores"), "The largest core count the search space holds for this block size (cost::SpaceCores).");
    m.def("tie_key", &cost::TieKey, nb::arg("us"), "A prediction rounded as ties are broken (np.round(us, 9)).");
    std::vector<std::pair<std::string, int>> features;
    for (int f = 0; f < residual::kFeatures; ++f) features.emplace_back(residual::kNames[f], residual::kLevels[f]);
    m.attr("RESIDUAL_FEATURES") = features;
    m.def(
        "residual_levels",
        [](int64_t n, int64_t elem, const Column& block, const Column& bn, const Column& tile, const Column& cores) {
            const size_t m = block.shape(0);
            if (bn.shape(0) != m || tile.shape(0) != m || cores.shape(0) != m) {
                throw std::invalid_argument("block, buffer_num, tile and cores must have the same length");
            }
            if (n < 0 || elem < 1) throw std::invalid_argument("n >= 0 and elem_bytes >= 1");
            for (size_t i = 0; i < m; ++i) {
                if (block(i) < elem || tile(i) < elem || cores(i) < 1) {
                    throw std::invalid_argument("block and tile >= elem_bytes, core_num >= 1");
                }
            }
            const size_t width = residual::kFeatures;
            int64_t* data = new int64_t[m * width]();
            nb::capsule owner(data, [](void* p) noexcept { delete[] static_cast<int64_t*>(p); });
            {
                nb::gil_scoped_release release;
                for (size_t i = 0; i < m; ++i) {
                    const cost::Kinds k = cost::KindsOf(n, elem, block(i), tile(i), cores(i));
                    residual::LevelsOf(k, elem, block(i), bn(i), tile(i), data + i * width);
                }
            }
            return nb::ndarray<nb::numpy, int64_t, nb::ndim<2>>(data, {m, width}, owner);
        },
        nb::arg("n"), nb::arg("elem_bytes"), nb::arg("block_bytes"), nb::arg("buffer_num"), nb::arg("tile_bytes"),
        nb::arg("core_num"),
        "(M, features) level of each residual feature (RESIDUAL_FEATURES) of M exact-scheme configurations at n "
        "elements (residual::LevelsOf).");
}
