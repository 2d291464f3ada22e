/**
 * The CPU twin's launcher: compiles the unchanged kernel sources (op_kernel/bce_grad.cpp and its fused
 * sibling bce_with_logits_fused.cpp) against the twin's kernel_operator.h and exposes one C function per
 * entry that Python calls through ctypes.
 *
 * Built per CANN flow, as kernel/cpu/__init__.py asks: the kernel-launch flow (nothing extra), or
 * the custom-op flow (-DBCE_GRAD_CUSTOM_OP -DDTYPE_LOGITS=T, with op_tiling_shim.h force-included
 * as the op compiler force-includes its generated tiling header). In the custom-op flow the kernel's
 * workspace argument is the framework's system workspace, which no kernel may touch.
 */
#include <cstring>
#include <string>
#include <vector>

#include "../op_kernel/bce_grad.cpp"
#include "../op_kernel/bce_with_logits_fused.cpp"
#include "kernel_operator.h"

extern "C" {

/** One GM tensor: name (for fault messages), address, size in bytes. */
struct BceTwinTensor {
    const char* name;
    void* data;
    uint64_t bytes;
};

struct BceTwinStats {
    uint64_t ubPeak;      // max UB bytes any core allocated
    uint64_t ubPeakMin;   // min over cores (all cores allocate the same plan)
};

}  // extern "C"

namespace {

/** Run one kernel entry (8 GM arguments, the 7th the workspace) over the block indices in `cores`. */
template <typename Entry>
int RunEntry(Entry entry, const BceTwinTensor* tensors, int ntensors, int64_t blockDim, int64_t ubCapacity,
             int threads, const int64_t* cores, int64_t ncores, BceTwinStats* stats, uint64_t* io, char* err,
             uint64_t errLen) {
    if (ntensors != 8) {
        std::snprintf(err, errLen, "the twin expects 8 tensors, got %d", ntensors);
        return 2;
    }
    std::vector<twin::GmRegion> regions(8);
    twin::Launch launch;
    launch.blockDim = blockDim;
    launch.ubCapacity = ubCapacity;
    uint8_t* ptr[8];
    for (int i = 0; i < 8; ++i) {
        ptr[i] = static_cast<uint8_t*>(tensors[i].data);
        regions[i].name = tensors[i].name;
        regions[i].base = ptr[i];
        regions[i].bytes = tensors[i].bytes;
        if (ptr[i] != nullptr) launch.regions.push_back(&regions[i]);
    }
    uint8_t* workspaceArg = ptr[6];
#if defined(BCE_GRAD_CUSTOM_OP)
    twin::GmRegion system;
    static uint8_t systemBytes[32];
    system.name = "system workspace";
    system.base = systemBytes;
    system.bytes = 0;  // the framework's: any access faults
    launch.regions.push_back(&system);
    launch.systemWorkspace = systemBytes;
    launch.userWorkspace = ptr[6];
    workspaceArg = systemBytes;
#endif
    std::vector<int64_t> which(cores, cores + ncores);
    std::vector<twin::CoreReport> reps = twin::RunCores(launch, which, threads, [&]() {
        entry(ptr[0], ptr[1], ptr[2], ptr[3], ptr[4], ptr[5], workspaceArg, ptr[7]);
    });
    stats->ubPeak = 0;
    stats->ubPeakMin = ~0ull;
    for (const auto& r : reps) {
        if (r.ubPeak > stats->ubPeak) stats->ubPeak = r.ubPeak;
        if (r.ubPeak < stats->ubPeakMin) stats->ubPeakMin = r.ubPeak;
    }
    for (int i = 0; i < 8; ++i) {
        io[2 * i] = regions[i].bytesRead.load();
        io[2 * i + 1] = regions[i].bytesWritten.load();
    }
    for (const auto& r : reps) {
        if (!r.fault.empty()) {
            std::snprintf(err, errLen, "[%s] %s", r.kind.c_str(), r.fault.c_str());
            return 1;
        }
    }
    return 0;
}

}  // namespace

extern "C" {

/**
 * Run bce_grad over the block indices in `cores` (all of [0, blockDim) if ncores == 0).
 * tensors: grad, logits, labels, weight, pos_weight, z, workspace, tiling (data may be null).
 * Returns 0, or 1 with the first fault (by block index) in err; per-region bytes read/written
 * go to io[2*i], io[2*i+1].
 */
int bce_twin_run(const BceTwinTensor* tensors, int ntensors, int64_t blockDim, int64_t ubCapacity, int threads,
                 const int64_t* cores, int64_t ncores, BceTwinStats* stats, uint64_t* io, char* err,
                 uint64_t errLen) {
    return RunEntry(bce_grad, tensors, ntensors, blockDim, ubCapacity, threads, cores, ncores, stats, io, err, errLen);
}

/** Run bce_with_logits_fused likewise; tensors: logits, labels, weight, pos_weight, dx, loss, workspace, tiling. */
int bce_twin_run_fused(const BceTwinTensor* tensors, int ntensors, int64_t blockDim, int64_t ubCapacity, int threads,
                       const int64_t* cores, int64_t ncores, BceTwinStats* stats, uint64_t* io, char* err,
                       uint64_t errLen) {
    return RunEntry(bce_with_logits_fused, tensors, ntensors, blockDim, ubCapacity, threads, cores, ncores, stats, io,
                    err, errLen);
}

/** Which CANN build flow this library was compiled as ("launch" or "op:<dtype>"). */
const char* bce_twin_flow() {
#if defined(BCE_GRAD_CUSTOM_OP)
#define BCE_TWIN_STR2(x) #x
#define BCE_TWIN_STR(x) BCE_TWIN_STR2(x)
    return "op:" BCE_TWIN_STR(DTYPE_LOGITS);
#else
    return "launch";
#endif
}

}  // extern "C"
