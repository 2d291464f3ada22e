/**
 * CPU twin runtime: one context per AI core (block index, its own UB and TPipe state), the
 * registry of GM tensors, and faults.
 *
 * Everything the NPU would silently get wrong or hang on is a Fault naming the core, the
 * operation, the tensor and the offset. The launcher runs each block index with its own
 * context (on a pool of threads) and reports the first fault by block index.
 */
#ifndef BCE_TWIN_RUNTIME_H
#define BCE_TWIN_RUNTIME_H

#include <atomic>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace twin {

/** A fault the hardware would not report (wrong data, a hang, an MTE error). */
class Fault : public std::exception {
public:
    Fault(std::string kind, std::string message) : kind_(std::move(kind)), message_(std::move(message)) {}
    const char* what() const noexcept override { return message_.c_str(); }
    const std::string& kind() const { return kind_; }

private:
    std::string kind_;
    std::string message_;
};

inline std::string Format(const char* fmt, ...) {
    char buf[768];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return buf;
}

/** A GM tensor as the host registered it: accesses outside [base, base + bytes) fault. */
struct GmRegion {
    std::string name;
    uint8_t* base = nullptr;
    uint64_t bytes = 0;
    std::atomic<uint64_t> bytesRead{0};
    std::atomic<uint64_t> bytesWritten{0};
};

struct Launch {
    std::vector<GmRegion*> regions;
    int64_t blockDim = 0;
    int64_t ubCapacity = 0;  // usable UB bytes per core (capacity minus the reserved part)
    // custom-op flow: the workspace argument is the framework's (no kernel may touch it);
    // GetUserWorkspace maps it to the user workspace behind it
    uint8_t* systemWorkspace = nullptr;
    uint8_t* userWorkspace = nullptr;
};

enum class BufState { Free, Allocated, Queued, Dequeued };

struct QueueBuffer {
    uint32_t offset = 0;
    uint32_t bytes = 0;
    BufState state = BufState::Free;
    uint32_t generation = 0;  // bumped on free: a tensor of an older generation is stale
};

struct QueueState {
    int position = 0;  // TPosition value
    int depth = 1;
    int index = 0;     // n-th queue of the pipe, for messages
    std::vector<QueueBuffer> buffers;
    std::vector<int> fifo;
    size_t nextAlloc = 0;
};

/** Per-core state: block index, UB arena, queues, pending event flags. */
struct Core {
    const Launch* launch = nullptr;
    int64_t blockIdx = 0;
    std::vector<uint8_t> ubStorage;
    uint8_t* ub = nullptr;  // 64-byte aligned start of the UB arena
    uint64_t ubUsed = 0;
    uint64_t ubPeak = 0;
    int totalBuffers = 0;
    int perPosition[32] = {0};
    std::vector<QueueState*> queues;
    bool pipeAlive = false;
    bool flags[64][8] = {{false}};
    std::string leak;  // set by ~TPipe when tensors are still allocated
};

inline thread_local Core* tlsCore = nullptr;

inline Core& Cur() {
    if (tlsCore == nullptr) throw Fault("no_core", "AscendC API used outside a kernel launch");
    return *tlsCore;
}

[[noreturn]] inline void Fail(const char* kind, const std::string& what) {
    long long idx = tlsCore ? static_cast<long long>(tlsCore->blockIdx) : -1;
    throw Fault(kind, Format("core %lld: %s", idx, what.c_str()));
}

inline GmRegion* FindRegion(const void* p) {
    const uint8_t* a = static_cast<const uint8_t*>(p);
    for (GmRegion* r : Cur().launch->regions) {
        if (a >= r->base && a < r->base + (r->bytes ? r->bytes : 1)) return r;
    }
    return nullptr;
}

/** Check a GM access of `bytes` at `p` against the tensor it was set up on. */
inline void CheckGm(const GmRegion* r, const void* p, uint64_t bytes, uint64_t elem, const char* op, bool write) {
    const uint8_t* a = static_cast<const uint8_t*>(p);
    if (r == nullptr) {
        Fail("gm_unregistered", Format("%s %s an address that belongs to no registered GM tensor", op,
                                       write ? "writes" : "reads"));
    }
    int64_t start = static_cast<int64_t>(a - r->base);
    int64_t end = start + static_cast<int64_t>(bytes);
    if (start < 0 || end > static_cast<int64_t>(r->bytes)) {
        int64_t e = static_cast<int64_t>(elem ? elem : 1);
        Fail("gm_out_of_bounds",
             Format("%s %s '%s' elements [%lld, %lld) but the tensor has %llu elements (bytes [%lld, %lld) of %llu)", op,
                    write ? "writes" : "reads", r->name.c_str(), (long long)(start / e), (long long)((end + e - 1) / e),
                    (unsigned long long)(r->bytes / e), (long long)start, (long long)end,
                    (unsigned long long)r->bytes));
    }
    if (write) {
        const_cast<GmRegion*>(r)->bytesWritten += bytes;
    } else {
        const_cast<GmRegion*>(r)->bytesRead += bytes;
    }
}

struct CoreReport {
    int64_t blockIdx = 0;
    std::string fault;
    std::string kind;
    uint64_t ubPeak = 0;
};

/**
 * Run `body` once per block index in `cores` (all of [0, blockDim) when empty), each on a fresh
 * Core, on up to `threads` threads. Returns one report per core, in the order of `cores`.
 */
inline std::vector<CoreReport> RunCores(const Launch& launch, std::vector<int64_t> cores, int threads,
                                        const std::function<void()>& body) {
    if (cores.empty()) {
        for (int64_t i = 0; i < launch.blockDim; ++i) cores.push_back(i);
    }
    std::vector<CoreReport> reports(cores.size());
    std::atomic<size_t> next{0};
    auto worker = [&]() {
        for (size_t i = next++; i < cores.size(); i = next++) {
            Core core;
            core.launch = &launch;
            core.blockIdx = cores[i];
            core.ubStorage.assign(static_cast<size_t>(launch.ubCapacity) + 64, 0xA5);  // garbage, not zeros
            uintptr_t raw = reinterpret_cast<uintptr_t>(core.ubStorage.data());
            core.ub = reinterpret_cast<uint8_t*>((raw + 63) & ~static_cast<uintptr_t>(63));
            tlsCore = &core;
            CoreReport& rep = reports[i];
            rep.blockIdx = cores[i];
            try {
                body();
                if (!core.leak.empty()) throw Fault("leak", core.leak);
            } catch (const Fault& f) {
                rep.fault = f.what();
                rep.kind = f.kind();
            } catch (const std::exception& e) {
                rep.fault = Format("core %lld: C++ exception: %s", (long long)cores[i], e.what());
                rep.kind = "exception";
            }
            rep.ubPeak = core.ubPeak;
            tlsCore = nullptr;
        }
    };
    int n = threads < 1 ? 1 : threads;
    if (static_cast<size_t>(n) > cores.size()) n = static_cast<int>(cores.size());
    std::vector<std::thread> pool;
    for (int t = 1; t < n; ++t) pool.emplace_back(worker);
    worker();
    for (auto& t : pool) t.join();
    return reports;
}

}  // namespace twin

#endif  // BCE_TWIN_RUNTIME_H
