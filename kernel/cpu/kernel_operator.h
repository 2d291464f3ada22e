/**
 * CPU twin of `kernel_operator.h`: exactly the AscendC API subset bcetune's kernel uses, with
 * the real signatures (template parameters, argument types, exact scalar types), so kernel code
 * that would not compile for the NPU does not compile here either. Semantics follow
 * ../shared/reference/ascendc-api.md (A2, arch 2201); every rule the hardware would break
 * silently, or hang on, is checked and raised as a twin::Fault:
 *   UB capacity (usable bytes per SoC), queue buffers per position (8) and in total (64),
 *   DataCopy lengths that are not 32-byte multiples, unaligned UB operands, GM accesses outside
 *   the registered tensor, DeQue on an empty queue, EnQue on a full one, AllocTensor with no
 *   free buffer, double free, stale tensors, tensors still allocated at the end, partial
 *   operand overlap, unpaired event flags, unsupported Cast modes and dtypes on A2.
 */
#ifndef BCE_TWIN_KERNEL_OPERATOR_H
#define BCE_TWIN_KERNEL_OPERATOR_H

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "twin_runtime.h"
#include "twin_types.h"

// Qualifiers are empty on the CPU (as in tikicpulib's stub_def.h).
#define __global__
#define __aicore__
#define __gm__
#define __ubuf__
#define __inout_pipe__(x)
#define GM_ADDR __gm__ uint8_t*
// Kernel-type and tiling-struct registration, as kernel_utils_macros.h defines them outside the op
// compiler's precompile pass. GET_TILING_DATA_WITH_STRUCT is NOT here: no real header defines it; only
// a custom-op build generates it (the twin's stand-in for that is op_tiling_shim.h, force-included in
// the twin's custom-op flow only).
#define KERNEL_TASK_TYPE_DEFAULT(value)
#define REGISTER_TILING_DEFAULT(tiling_struct)                                                        \
    static_assert(std::is_trivially_copyable<tiling_struct>::value &&                                 \
                      std::is_standard_layout<tiling_struct>::value,                                  \
                  "REGISTER_TILING_DEFAULT: a tiling struct is plain data (no pointers, no members)")

enum pipe_t { PIPE_S = 1, PIPE_V = 2, PIPE_M = 3, PIPE_MTE1 = 4, PIPE_MTE2 = 5, PIPE_MTE3 = 6, PIPE_FIX = 7, PIPE_ALL = 10 };
enum event_t { EVENT_ID0 = 0, EVENT_ID1, EVENT_ID2, EVENT_ID3, EVENT_ID4, EVENT_ID5, EVENT_ID6, EVENT_ID7 };

namespace AscendC {

enum class TPosition : uint8_t {
    GM, A1, A2, B1, B2, C1, C2, CO1, CO2, VECIN, VECOUT, VECCALC, LCM = VECCALC, SPM, SHM = SPM, TSCM,
    C2PIPE2GM, C2PIPE2LOCAL, MAX
};
using QuePosition = TPosition;

// As kernel_utils_mode.h for arch 2201/3002: CAST_HYBRID and the other newer modes exist only on later arches.
enum class RoundMode : uint8_t { CAST_NONE = 0, CAST_RINT, CAST_FLOOR, CAST_CEIL, CAST_ROUND, CAST_TRUNC, CAST_ODD };

enum class HardEvent : uint8_t {
    MTE2_MTE1, MTE1_MTE2, MTE1_M, M_MTE1, MTE2_V, V_MTE2, MTE3_V, V_MTE3, M_V, V_M, V_V, MTE3_MTE1, MTE1_MTE3,
    MTE1_V, MTE2_M, M_MTE2, V_MTE1, M_FIX, FIX_M, MTE3_MTE2, MTE2_MTE3, S_V, V_S, S_MTE2, MTE2_S, S_MTE3, MTE3_S,
    MTE2_FIX, FIX_MTE2, FIX_S, M_S, FIX_MTE3, MTE1_FIX, FIX_MTE1, FIX_FIX, MAX
};
using TEventID = int8_t;

constexpr int32_t QBUF_MAX_LEN = 64;
constexpr int32_t MAX_BUFFERS_PER_POSITION = 8;

__aicore__ inline int64_t GetBlockIdx() { return twin::Cur().blockIdx; }
__aicore__ inline int64_t GetBlockNum() { return twin::Cur().launch->blockDim; }

/**
 * Custom-op kernels get the framework's workspace first and find theirs behind it. The twin's
 * custom-op launch passes a "system workspace" that no kernel may touch; this returns the user part.
 */
__aicore__ inline GM_ADDR GetUserWorkspace(GM_ADDR workspace) {
    const twin::Launch& l = *twin::Cur().launch;
    if (workspace == nullptr || workspace != l.systemWorkspace) {
        twin::Fail("workspace", "GetUserWorkspace on a pointer that is not the framework's workspace argument");
    }
    return l.userWorkspace;
}

namespace twin_detail {

inline const char* PositionName(TPosition p) {
    switch (p) {
        case TPosition::VECIN: return "VECIN";
        case TPosition::VECOUT: return "VECOUT";
        case TPosition::VECCALC: return "VECCALC";
        default: return "other";
    }
}

template <typename T> constexpr const char* TypeName() {
    if (std::is_same<T, float>::value) return "float";
    if (std::is_same<T, half>::value) return "half";
    if (std::is_same<T, bfloat16_t>::value) return "bfloat16_t";
    if (std::is_same<T, int32_t>::value) return "int32_t";
    if (std::is_same<T, int16_t>::value) return "int16_t";
    if (std::is_same<T, uint32_t>::value) return "uint32_t";
    if (std::is_same<T, uint16_t>::value) return "uint16_t";
    if (std::is_same<T, uint8_t>::value) return "uint8_t";
    return "other";
}

template <typename T> constexpr bool IsOneOf() { return false; }
template <typename T, typename U, typename... R> constexpr bool IsOneOf() {
    return std::is_same<T, U>::value || IsOneOf<T, R...>();
}

}  // namespace twin_detail

/** A UB tensor: an address in this core's UB arena, its byte length, and the buffer it came from. */
template <typename T> class LocalTensor {
public:
    using PrimType = T;
    LocalTensor() = default;

    __aicore__ inline uint32_t GetSize() const { return bytes_ / sizeof(T); }
    __aicore__ inline TPosition GetPosition() const { return pos_; }
    __aicore__ inline uint64_t GetPhyAddr() const { return static_cast<uint64_t>(addr_ - twin::Cur().ub); }

    __aicore__ inline LocalTensor operator[](const uint32_t offset) const {
        LocalTensor t = *this;
        uint64_t skip = static_cast<uint64_t>(offset) * sizeof(T);
        if (skip > bytes_) twin::Fail("ub_out_of_bounds", twin::Format("LocalTensor[%u] past its %u elements", offset, GetSize()));
        t.addr_ += skip;
        t.bytes_ -= static_cast<uint32_t>(skip);
        return t;
    }

    template <typename CAST_T> __aicore__ inline LocalTensor<CAST_T> ReinterpretCast() const {
        LocalTensor<CAST_T> t;
        t.addr_ = addr_;
        t.bytes_ = bytes_;
        t.pos_ = pos_;
        t.queue_ = queue_;
        t.buf_ = buf_;
        t.gen_ = gen_;
        return t;
    }

    __aicore__ inline T GetValue(const uint32_t index) const {
        CheckIndex(index, "GetValue");
        T v;
        std::memcpy(&v, addr_ + static_cast<uint64_t>(index) * sizeof(T), sizeof(T));
        return v;
    }

    template <typename T1> __aicore__ inline void SetValue(const uint32_t index, const T1 value) const {
        CheckIndex(index, "SetValue");
        T v = static_cast<T>(value);
        std::memcpy(addr_ + static_cast<uint64_t>(index) * sizeof(T), &v, sizeof(T));
    }

    // --- twin internals (not AscendC API) ---
    T* Data() const { return reinterpret_cast<T*>(addr_); }
    uint8_t* Raw() const { return addr_; }
    uint32_t Bytes() const { return bytes_; }
    void CheckLive(const char* op) const {
        if (addr_ == nullptr) twin::Fail("uninitialised_tensor", twin::Format("%s on a LocalTensor that was never allocated", op));
        if (queue_ != nullptr) {
            const twin::QueueBuffer& b = queue_->buffers[buf_];
            if (b.generation != gen_ || b.state == twin::BufState::Free) {
                twin::Fail("stale_tensor", twin::Format("%s on a tensor of %s queue #%d buffer %d after FreeTensor", op,
                                                        twin_detail::PositionName(static_cast<TPosition>(queue_->position)),
                                                        queue_->index, buf_));
            }
        }
    }
    void CheckIndex(uint32_t index, const char* op) const {
        CheckLive(op);
        if (index >= GetSize()) {
            twin::Fail("ub_out_of_bounds", twin::Format("%s(%u) past the tensor's %u elements", op, index, GetSize()));
        }
    }

    uint8_t* addr_ = nullptr;
    uint32_t bytes_ = 0;
    TPosition pos_ = TPosition::VECCALC;
    twin::QueueState* queue_ = nullptr;
    int buf_ = -1;
    uint32_t gen_ = 0;
};

/** A GM tensor: a typed view into a registered region (bounds are the region's). */
template <typename T> class GlobalTensor {
public:
    using PrimType = T;
    __aicore__ inline void SetGlobalBuffer(__gm__ PrimType* buffer, uint64_t bufferSize) {
        base_ = buffer;
        size_ = bufferSize;
        region_ = buffer ? twin::FindRegion(buffer) : nullptr;
    }
    __aicore__ inline void SetGlobalBuffer(__gm__ PrimType* buffer) { SetGlobalBuffer(buffer, 0); }
    __aicore__ inline uint64_t GetSize() const { return size_; }
    __aicore__ inline const __gm__ PrimType* GetPhyAddr() const { return base_; }
    __aicore__ inline const __gm__ PrimType* GetPhyAddr(const uint64_t offset) const { return base_ + offset; }
    __aicore__ inline GlobalTensor operator[](const uint64_t offset) const {
        GlobalTensor t = *this;
        t.base_ = base_ + offset;
        t.size_ = size_ > offset ? size_ - offset : 0;
        return t;
    }
    __aicore__ inline PrimType GetValue(const uint64_t offset) const {
        twin::CheckGm(region_, base_ + offset, sizeof(T), sizeof(T), "GlobalTensor::GetValue", false);
        T v;
        std::memcpy(&v, base_ + offset, sizeof(T));
        return v;
    }
    __aicore__ inline void SetValue(const uint64_t offset, PrimType value) {
        twin::CheckGm(region_, base_ + offset, sizeof(T), sizeof(T), "GlobalTensor::SetValue", true);
        std::memcpy(base_ + offset, &value, sizeof(T));
    }

    // --- twin internals ---
    T* Data() const { return base_; }
    const twin::GmRegion* Region() const { return region_; }

private:
    T* base_ = nullptr;
    uint64_t size_ = 0;
    const twin::GmRegion* region_ = nullptr;
};

class TPipe;

/** TQueBind/TQue: `depth` tensors may wait in the queue; InitBuffer gives it `num` buffers. */
template <TPosition src, TPosition dst, int32_t depth, auto mask = 0> class TQueBind {
public:
    template <typename T> __aicore__ inline LocalTensor<T> AllocTensor() {
        twin::QueueState& q = State("AllocTensor");
        for (size_t k = 0; k < q.buffers.size(); ++k) {
            size_t i = (q.nextAlloc + k) % q.buffers.size();
            twin::QueueBuffer& b = q.buffers[i];
            if (b.state != twin::BufState::Free) continue;
            q.nextAlloc = (i + 1) % q.buffers.size();
            b.state = twin::BufState::Allocated;
            return Tensor<T>(q, static_cast<int>(i));
        }
        twin::Fail("alloc_no_free_buffer",
                   twin::Format("AllocTensor on %s queue #%d: all %zu buffers are in use (the NPU would wait forever)",
                                twin_detail::PositionName(kPos), q.index, q.buffers.size()));
    }

    template <typename T> __aicore__ inline bool EnQue(const LocalTensor<T>& tensor) {
        twin::QueueState& q = State("EnQue");
        Own(q, tensor, "EnQue");
        twin::QueueBuffer& b = q.buffers[tensor.buf_];
        if (b.state != twin::BufState::Allocated) {
            twin::Fail("enque_state", twin::Format("EnQue on %s queue #%d of a buffer that is not freshly allocated",
                                                   twin_detail::PositionName(kPos), q.index));
        }
        if (static_cast<int>(q.fifo.size()) >= (depth > 0 ? depth : 1)) {
            twin::Fail("enque_full", twin::Format("EnQue on a full %s queue #%d (depth %d, %zu waiting)",
                                                  twin_detail::PositionName(kPos), q.index, depth, q.fifo.size()));
        }
        b.state = twin::BufState::Queued;
        q.fifo.push_back(tensor.buf_);
        return true;
    }

    template <typename T> __aicore__ inline LocalTensor<T> DeQue() {
        twin::QueueState& q = State("DeQue");
        if (q.fifo.empty()) {
            twin::Fail("deque_empty", twin::Format("DeQue on an empty %s queue #%d (the NPU would wait forever)",
                                                   twin_detail::PositionName(kPos), q.index));
        }
        int i = q.fifo.front();
        q.fifo.erase(q.fifo.begin());
        q.buffers[i].state = twin::BufState::Dequeued;
        return Tensor<T>(q, i);
    }

    template <typename T> __aicore__ inline void FreeTensor(LocalTensor<T>& tensor) {
        twin::QueueState& q = State("FreeTensor");
        Own(q, tensor, "FreeTensor");
        twin::QueueBuffer& b = q.buffers[tensor.buf_];
        if (b.state == twin::BufState::Free || b.generation != tensor.gen_) {
            twin::Fail("double_free", twin::Format("FreeTensor twice on %s queue #%d buffer %d",
                                                   twin_detail::PositionName(kPos), q.index, tensor.buf_));
        }
        if (b.state == twin::BufState::Queued) {
            twin::Fail("free_queued", twin::Format("FreeTensor of a tensor still waiting in %s queue #%d",
                                                   twin_detail::PositionName(kPos), q.index));
        }
        b.state = twin::BufState::Free;
        ++b.generation;
    }

    __aicore__ inline int32_t GetTensorCountInQue() { return static_cast<int32_t>(State("GetTensorCountInQue").fifo.size()); }
    __aicore__ inline bool HasTensorInQue() { return GetTensorCountInQue() > 0; }

    TQueBind() = default;
    TQueBind(const TQueBind&) = delete;
    TQueBind& operator=(const TQueBind&) = delete;
    /** A queue going away with tensors still allocated is a leak (the pipe outlives the queues). */
    ~TQueBind() {
        twin::Core* c = twin::tlsCore;
        if (c == nullptr || !initialised_) return;
        for (size_t i = 0; i < c->queues.size(); ++i) {
            if (c->queues[i] == &state_) c->queues.erase(c->queues.begin() + static_cast<long>(i));
        }
        if (std::uncaught_exceptions() > 0 || !c->leak.empty()) return;
        for (size_t i = 0; i < state_.buffers.size(); ++i) {
            if (state_.buffers[i].state != twin::BufState::Free) {
                c->leak = twin::Format("core %lld: tensor still allocated at the end: %s queue #%d buffer %zu",
                                       (long long)c->blockIdx, twin_detail::PositionName(kPos), state_.index, i);
                return;
            }
        }
    }

    // --- twin internals ---
    static constexpr TPosition kPos = src == TPosition::VECOUT || dst == TPosition::GM ? TPosition::VECOUT : src == TPosition::GM ? dst : src;
    twin::QueueState state_;
    bool initialised_ = false;

private:
    twin::QueueState& State(const char* op) {
        if (!initialised_) twin::Fail("queue_uninitialised", twin::Format("%s on a queue that InitBuffer never set up", op));
        return state_;
    }
    template <typename T> LocalTensor<T> Tensor(twin::QueueState& q, int i) {
        LocalTensor<T> t;
        t.addr_ = twin::Cur().ub + q.buffers[i].offset;
        t.bytes_ = q.buffers[i].bytes;
        t.pos_ = kPos;
        t.queue_ = &q;
        t.buf_ = i;
        t.gen_ = q.buffers[i].generation;
        return t;
    }
    template <typename T> void Own(twin::QueueState& q, const LocalTensor<T>& t, const char* op) {
        if (t.queue_ != &q) {
            twin::Fail("foreign_tensor", twin::Format("%s on %s queue #%d of a tensor that belongs to another queue", op,
                                                      twin_detail::PositionName(kPos), q.index));
        }
    }
};

template <TPosition pos, int32_t depth, auto mask = 0>
class TQue : public TQueBind<pos == TPosition::VECOUT ? TPosition::VECOUT : TPosition::GM,
                             pos == TPosition::VECOUT ? TPosition::GM : pos, depth, mask> {};

/** TBuf: one UB block for temporaries; Get returns the whole block (or its first len elements). */
template <TPosition pos = TPosition::LCM> class TBuf {
public:
    template <typename T> __aicore__ inline LocalTensor<T> Get() { return Get<T>(bytes_ / sizeof(T)); }
    template <typename T> __aicore__ inline LocalTensor<T> Get(uint32_t len) {
        if (!initialised_) twin::Fail("tbuf_uninitialised", "TBuf::Get on a TBuf that InitBuffer never set up");
        if (static_cast<uint64_t>(len) * sizeof(T) > bytes_) {
            twin::Fail("ub_out_of_bounds", twin::Format("TBuf::Get(%u) of %s needs %llu B but the TBuf has %u B", len,
                                                        twin_detail::TypeName<T>(),
                                                        (unsigned long long)(len * sizeof(T)), bytes_));
        }
        LocalTensor<T> t;
        t.addr_ = twin::Cur().ub + offset_;
        t.bytes_ = static_cast<uint32_t>(len * sizeof(T));
        t.pos_ = pos;
        return t;
    }

    uint32_t offset_ = 0;
    uint32_t bytes_ = 0;
    bool initialised_ = false;
};

/** One per kernel: hands out UB for queues and TBufs; its destructor checks nothing is still allocated. */
class TPipe {
public:
    __aicore__ inline TPipe() {
        twin::Core& c = twin::Cur();
        if (c.pipeAlive) twin::Fail("second_tpipe", "a second TPipe in one kernel (exactly one is allowed)");
        c.pipeAlive = true;
        pipePtr() = this;
    }
    __aicore__ inline ~TPipe() {
        twin::Core* c = twin::tlsCore;
        if (c == nullptr) return;
        c->pipeAlive = false;
        pipePtr() = nullptr;
        if (std::uncaught_exceptions() > 0 || !c->leak.empty()) return;
        for (twin::QueueState* q : c->queues) {
            for (size_t i = 0; i < q->buffers.size(); ++i) {
                if (q->buffers[i].state != twin::BufState::Free) {
                    c->leak = twin::Format("core %lld: tensor still allocated at the end: %s queue #%d buffer %zu",
                                           (long long)c->blockIdx,
                                           twin_detail::PositionName(static_cast<TPosition>(q->position)), q->index, i);
                    return;
                }
            }
        }
    }

    template <class T> __aicore__ inline bool InitBuffer(T& que, uint8_t num, uint32_t len) {
        twin::Core& c = twin::Cur();
        if (num < 1 || num > QBUF_MAX_LEN) twin::Fail("queue_limit", twin::Format("InitBuffer with num=%u (1..64)", num));
        if (len == 0) twin::Fail("bad_len", "InitBuffer with len=0");
        if (que.initialised_) twin::Fail("queue_reinit", "InitBuffer twice on one queue");
        int pos = static_cast<int>(T::kPos);
        if (c.perPosition[pos] + num > MAX_BUFFERS_PER_POSITION) {
            twin::Fail("queue_limit", twin::Format("max buffer number in same queue position is %d: %s would have %d",
                                                   MAX_BUFFERS_PER_POSITION, twin_detail::PositionName(T::kPos),
                                                   c.perPosition[pos] + num));
        }
        if (c.totalBuffers + num > QBUF_MAX_LEN) {
            twin::Fail("queue_limit", twin::Format("more than %d queue buffers in one TPipe", QBUF_MAX_LEN));
        }
        uint32_t rounded = (len + 31u) / 32u * 32u;
        que.state_.position = pos;
        que.state_.index = static_cast<int>(c.queues.size());
        que.state_.buffers.clear();
        for (int i = 0; i < num; ++i) {
            twin::QueueBuffer b;
            b.offset = Reserve(rounded, "InitBuffer(queue)");
            b.bytes = rounded;
            que.state_.buffers.push_back(b);
        }
        c.perPosition[pos] += num;
        c.totalBuffers += num;
        c.queues.push_back(&que.state_);
        que.initialised_ = true;
        return true;
    }

    template <TPosition pos> __aicore__ inline bool InitBuffer(TBuf<pos>& buf, uint32_t len) {
        if (len == 0) twin::Fail("bad_len", "InitBuffer(TBuf) with len=0");
        if (buf.initialised_) twin::Fail("queue_reinit", "InitBuffer twice on one TBuf");
        uint32_t rounded = (len + 31u) / 32u * 32u;
        buf.offset_ = Reserve(rounded, "InitBuffer(TBuf)");
        buf.bytes_ = rounded;
        buf.initialised_ = true;
        return true;
    }

    __aicore__ inline TEventID FetchEventID(HardEvent) { return 0; }
    template <HardEvent evt> __aicore__ inline TEventID FetchEventID() { return 0; }

    static TPipe*& pipePtr() {
        static thread_local TPipe* p = nullptr;
        return p;
    }

private:
    static uint32_t Reserve(uint32_t bytes, const char* op) {
        twin::Core& c = twin::Cur();
        if (c.ubUsed + bytes > static_cast<uint64_t>(c.launch->ubCapacity)) {
            twin::Fail("ub_overflow",
                       twin::Format("%s of %u B at UB offset %llu exceeds the usable UB of %lld B (%llu B would be in use)",
                                    op, bytes, (unsigned long long)c.ubUsed, (long long)c.launch->ubCapacity,
                                    (unsigned long long)(c.ubUsed + bytes)));
        }
        uint32_t off = static_cast<uint32_t>(c.ubUsed);
        c.ubUsed += bytes;
        if (c.ubUsed > c.ubPeak) c.ubPeak = c.ubUsed;
        return off;
    }
};

__aicore__ inline TPipe* GetTPipePtr() { return TPipe::pipePtr(); }

// ---------------------------------------------------------------- synchronisation

template <pipe_t pipe> __aicore__ inline void PipeBarrier() {
    static_assert(pipe != PIPE_S, "PipeBarrier<PIPE_S> is not allowed");
}

template <HardEvent event> __aicore__ inline void SetFlag(int32_t eventID) {
    if (eventID < 0 || eventID > 7) twin::Fail("event_id", twin::Format("SetFlag with event id %d (0..7 on A2)", eventID));
    bool& f = twin::Cur().flags[static_cast<int>(event)][eventID];
    if (f) twin::Fail("event_pairing", twin::Format("SetFlag twice on event %d id %d without WaitFlag (undefined, can hang)", static_cast<int>(event), eventID));
    f = true;
}

template <HardEvent event> __aicore__ inline void WaitFlag(int32_t eventID) {
    if (eventID < 0 || eventID > 7) twin::Fail("event_id", twin::Format("WaitFlag with event id %d (0..7 on A2)", eventID));
    bool& f = twin::Cur().flags[static_cast<int>(event)][eventID];
    if (!f) twin::Fail("event_pairing", twin::Format("WaitFlag on event %d id %d with no SetFlag before it (hangs)", static_cast<int>(event), eventID));
    f = false;
}

// ---------------------------------------------------------------- data movement

struct DataCopyParams {
    DataCopyParams() = default;
    DataCopyParams(const uint16_t count, const uint16_t len, const uint16_t srcStrideIn, const uint16_t dstStrideIn)
        : blockCount(count), blockLen(len), srcStride(srcStrideIn), dstStride(dstStrideIn) {}
    uint16_t blockCount = 1;
    uint16_t blockLen = 0;
    uint16_t srcStride = 0;
    uint16_t dstStride = 0;
};

struct DataCopyExtParams {
    DataCopyExtParams() = default;
    DataCopyExtParams(const uint16_t count, const uint32_t len, const uint32_t srcStrideIn, const uint32_t dstStrideIn,
                      const uint32_t rsvIn)
        : blockCount(count), blockLen(len), srcStride(srcStrideIn), dstStride(dstStrideIn), rsv(rsvIn) {}
    uint16_t blockCount = 1;
    uint32_t blockLen = 0;
    uint32_t srcStride = 0;
    uint32_t dstStride = 0;
    uint32_t rsv = 0;
};

template <typename T> struct DataCopyPadExtParams {
    DataCopyPadExtParams() = default;
    DataCopyPadExtParams(const bool isPadValue, const uint8_t leftPadValue, const uint8_t rightPadValue, T padValue)
        : isPad(isPadValue), leftPadding(leftPadValue), rightPadding(rightPadValue), paddingValue(padValue) {}
    bool isPad = false;
    uint8_t leftPadding = 0;
    uint8_t rightPadding = 0;
    T paddingValue = T();
};

namespace twin_detail {

template <typename T> void CheckUb(const LocalTensor<T>& t, uint64_t bytes, const char* op, const char* role) {
    t.CheckLive(op);
    uint64_t off = static_cast<uint64_t>(t.Raw() - twin::Cur().ub);
    if (off % 32) twin::Fail("ub_unaligned", twin::Format("%s: %s UB address %llu is not 32-byte aligned", op, role, (unsigned long long)off));
    if (bytes > t.Bytes()) {
        twin::Fail("ub_out_of_bounds", twin::Format("%s: %s needs %llu B but the local tensor has %u B", op, role,
                                                    (unsigned long long)bytes, t.Bytes()));
    }
}

template <typename T> void CheckCopyLength(uint32_t count, const char* op) {
    uint64_t bytes = static_cast<uint64_t>(count) * sizeof(T);
    if (bytes % 32) {
        twin::Fail("datacopy_not_32B", twin::Format("%s of %u %s elements (%llu B) is not a multiple of 32 B: the NPU "
                                                    "would move only %llu B; use DataCopyPad",
                                                    op, count, TypeName<T>(), (unsigned long long)bytes,
                                                    (unsigned long long)(bytes / 32 * 32)));
    }
}

template <typename T> void CheckGmAlign(const GlobalTensor<T>& g, const char* op) {
    if (reinterpret_cast<uintptr_t>(g.Data()) % sizeof(T)) {
        twin::Fail("gm_unaligned", twin::Format("%s: GM address not aligned to sizeof(%s)", op, TypeName<T>()));
    }
}

}  // namespace twin_detail

/** GM -> UB, count elements; count * sizeof(T) must be a multiple of 32 B. */
template <typename T> __aicore__ inline void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const uint32_t count) {
    twin_detail::CheckCopyLength<T>(count, "DataCopy GM->UB");
    twin_detail::CheckGmAlign(src, "DataCopy GM->UB");
    uint64_t bytes = static_cast<uint64_t>(count) * sizeof(T);
    twin_detail::CheckUb(dst, bytes, "DataCopy GM->UB", "destination");
    twin::CheckGm(src.Region(), src.Data(), bytes, sizeof(T), "DataCopy GM->UB", false);
    std::memcpy(dst.Raw(), src.Data(), bytes);
}

/** UB -> GM, count elements; count * sizeof(T) must be a multiple of 32 B. */
template <typename T> __aicore__ inline void DataCopy(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const uint32_t count) {
    twin_detail::CheckCopyLength<T>(count, "DataCopy UB->GM");
    twin_detail::CheckGmAlign(dst, "DataCopy UB->GM");
    uint64_t bytes = static_cast<uint64_t>(count) * sizeof(T);
    twin_detail::CheckUb(src, bytes, "DataCopy UB->GM", "source");
    twin::CheckGm(dst.Region(), dst.Data(), bytes, sizeof(T), "DataCopy UB->GM", true);
    std::memcpy(dst.Data(), src.Raw(), bytes);
}

/** UB -> UB, count elements (32-B multiple, both aligned). */
template <typename T> __aicore__ inline void DataCopy(const LocalTensor<T>& dst, const LocalTensor<T>& src, const uint32_t count) {
    twin_detail::CheckCopyLength<T>(count, "DataCopy UB->UB");
    uint64_t bytes = static_cast<uint64_t>(count) * sizeof(T);
    twin_detail::CheckUb(dst, bytes, "DataCopy UB->UB", "destination");
    twin_detail::CheckUb(src, bytes, "DataCopy UB->UB", "source");
    std::memmove(dst.Raw(), src.Raw(), bytes);
}

/** GM -> UB, byte-granular: each block lands 32-B padded in UB (dummy tail = the block's first element). */
template <typename T>
__aicore__ inline void DataCopyPad(const LocalTensor<T>& dst, const GlobalTensor<T>& src,
                                   const DataCopyExtParams& dataCopyParams, const DataCopyPadExtParams<T>& padParams) {
    const char* op = "DataCopyPad GM->UB";
    const DataCopyExtParams& p = dataCopyParams;
    if (p.blockCount == 0 || p.blockLen == 0) return;
    if (p.blockCount > 4095) twin::Fail("datacopy_params", twin::Format("%s: blockCount %u > 4095", op, p.blockCount));
    if (p.blockLen > 2097151u || p.blockLen % sizeof(T)) {
        twin::Fail("datacopy_params", twin::Format("%s: blockLen %u B is not a multiple of sizeof(%s) or > 2097151", op,
                                                   p.blockLen, twin_detail::TypeName<T>()));
    }
    if (padParams.leftPadding * sizeof(T) > 32 || padParams.rightPadding * sizeof(T) > 32) {
        twin::Fail("datacopy_params", twin::Format("%s: padding over 32 B", op));
    }
    twin_detail::CheckGmAlign(src, op);
    uint64_t lp = padParams.leftPadding * sizeof(T), rp = padParams.rightPadding * sizeof(T);
    uint64_t blockUb = (lp + p.blockLen + rp + 31) / 32 * 32;
    uint64_t span = (blockUb + static_cast<uint64_t>(p.dstStride) * 32) * (p.blockCount - 1) + blockUb;
    twin_detail::CheckUb(dst, span, op, "destination");
    const uint8_t* s = reinterpret_cast<const uint8_t*>(src.Data());
    uint8_t* d = dst.Raw();
    for (uint32_t b = 0; b < p.blockCount; ++b) {
        twin::CheckGm(src.Region(), s, p.blockLen, sizeof(T), op, false);
        uint8_t* blk = d + b * (blockUb + static_cast<uint64_t>(p.dstStride) * 32);
        T fill = padParams.paddingValue;
        if (!padParams.isPad) std::memcpy(&fill, s, sizeof(T));  // documented dummy: the block's first element
        for (uint64_t o = 0; o + sizeof(T) <= blockUb; o += sizeof(T)) std::memcpy(blk + o, &fill, sizeof(T));
        std::memcpy(blk + lp, s, p.blockLen);
        s += p.blockLen + p.srcStride;
    }
}

/** UB -> GM, byte-granular: exactly blockLen bytes per block reach GM. */
template <typename T>
__aicore__ inline void DataCopyPad(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyExtParams& dataCopyParams) {
    const char* op = "DataCopyPad UB->GM";
    const DataCopyExtParams& p = dataCopyParams;
    if (p.blockCount == 0 || p.blockLen == 0) return;
    if (p.blockCount > 4095) twin::Fail("datacopy_params", twin::Format("%s: blockCount %u > 4095", op, p.blockCount));
    if (p.blockLen > 2097151u || p.blockLen % sizeof(T)) {
        twin::Fail("datacopy_params", twin::Format("%s: blockLen %u B is not a multiple of sizeof(%s) or > 2097151", op,
                                                   p.blockLen, twin_detail::TypeName<T>()));
    }
    twin_detail::CheckGmAlign(dst, op);
    uint64_t blockUb = (p.blockLen + 31u) / 32u * 32u;
    uint64_t span = (blockUb + static_cast<uint64_t>(p.srcStride) * 32) * (p.blockCount - 1) + p.blockLen;
    twin_detail::CheckUb(src, span, op, "source");
    uint8_t* d = reinterpret_cast<uint8_t*>(dst.Data());
    for (uint32_t b = 0; b < p.blockCount; ++b) {
        twin::CheckGm(dst.Region(), d, p.blockLen, sizeof(T), op, true);
        std::memcpy(d, src.Raw() + b * (blockUb + static_cast<uint64_t>(p.srcStride) * 32), p.blockLen);
        d += p.blockLen + p.dstStride;
    }
}

// ---------------------------------------------------------------- vector compute (count forms)

namespace twin_detail {

template <typename T> void CheckVec(const LocalTensor<T>& t, int32_t count, const char* op, const char* role) {
    if (t.GetPosition() != TPosition::VECIN && t.GetPosition() != TPosition::VECOUT &&
        t.GetPosition() != TPosition::VECCALC) {
        twin::Fail("bad_position", twin::Format("%s: %s is not in VECIN/VECOUT/VECCALC", op, role));
    }
    CheckUb(t, static_cast<uint64_t>(count) * sizeof(T), op, role);
}

inline bool PartialOverlap(const uint8_t* a, uint64_t an, const uint8_t* b, uint64_t bn) {
    return a != b && a < b + bn && b < a + an;
}

template <typename D, typename S> void CheckOverlap(const LocalTensor<D>& d, const LocalTensor<S>& s, int32_t count, const char* op) {
    if (PartialOverlap(d.Raw(), count * sizeof(D), s.Raw(), count * sizeof(S))) {
        twin::Fail("partial_overlap", twin::Format("%s: destination and source overlap partially", op));
    }
}

template <typename T> bool Begin(int32_t count, const char* op) {
    if (count < 0) twin::Fail("bad_count", twin::Format("%s with count %d", op, count));
    return count > 0;
}

/** Element arithmetic: 16-bit floats compute through float and round back (RNE); ints wrap. */
template <typename T, typename F> T Apply2(T a, T b, F f) {
    if constexpr (std::is_same<T, half>::value || std::is_same<T, bfloat16_t>::value) {
        return T(static_cast<float>(f(static_cast<float>(a), static_cast<float>(b))));
    } else if constexpr (std::is_integral<T>::value) {
        using W = typename std::make_unsigned<T>::type;
        return static_cast<T>(static_cast<W>(f(static_cast<int64_t>(a), static_cast<int64_t>(b))));
    } else {
        return f(a, b);
    }
}

template <typename T, typename F>
void Binary(const LocalTensor<T>& dst, const LocalTensor<T>& s0, const LocalTensor<T>& s1, int32_t count, const char* op, F f) {
    if (!Begin<T>(count, op)) return;
    CheckVec(dst, count, op, "dst");
    CheckVec(s0, count, op, "src0");
    CheckVec(s1, count, op, "src1");
    CheckOverlap(dst, s0, count, op);
    CheckOverlap(dst, s1, count, op);
    T* d = dst.Data();
    const T* a = s0.Data();
    const T* b = s1.Data();
    for (int32_t i = 0; i < count; ++i) d[i] = Apply2<T>(a[i], b[i], f);
}

template <typename T, typename F>
void Scalar(const LocalTensor<T>& dst, const LocalTensor<T>& src, const T& s, int32_t count, const char* op, F f) {
    if (!Begin<T>(count, op)) return;
    CheckVec(dst, count, op, "dst");
    CheckVec(src, count, op, "src");
    CheckOverlap(dst, src, count, op);
    T* d = dst.Data();
    const T* a = src.Data();
    for (int32_t i = 0; i < count; ++i) d[i] = Apply2<T>(a[i], s, f);
}

template <typename T> constexpr bool kArith = IsOneOf<T, int16_t, half, int32_t, float>();
template <typename T> constexpr bool kFloatArith = IsOneOf<T, half, float>();

}  // namespace twin_detail

#define BCE_TWIN_ARITH(T, name) \
    static_assert(twin_detail::kArith<T>, #name ": A2 supports int16_t, half, int32_t and float only")
#define BCE_TWIN_FARITH(T, name) static_assert(twin_detail::kFloatArith<T>, #name ": A2 supports half and float only")

template <typename T> __aicore__ inline void Add(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1, const int32_t& count) {
    BCE_TWIN_ARITH(T, Add);
    twin_detail::Binary(dst, src0, src1, count, "Add", [](auto a, auto b) { return a + b; });
}
template <typename T> __aicore__ inline void Sub(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1, const int32_t& count) {
    BCE_TWIN_ARITH(T, Sub);
    twin_detail::Binary(dst, src0, src1, count, "Sub", [](auto a, auto b) { return a - b; });
}
template <typename T> __aicore__ inline void Mul(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1, const int32_t& count) {
    BCE_TWIN_ARITH(T, Mul);
    twin_detail::Binary(dst, src0, src1, count, "Mul", [](auto a, auto b) { return a * b; });
}
template <typename T> __aicore__ inline void Div(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1, const int32_t& count) {
    BCE_TWIN_FARITH(T, Div);
    twin_detail::Binary(dst, src0, src1, count, "Div", [](auto a, auto b) { return a / b; });
}
template <typename T> __aicore__ inline void Max(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1, const int32_t& count) {
    BCE_TWIN_ARITH(T, Max);
    twin_detail::Binary(dst, src0, src1, count, "Max", [](auto a, auto b) { return a > b ? a : b; });
}
template <typename T> __aicore__ inline void Min(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1, const int32_t& count) {
    BCE_TWIN_ARITH(T, Min);
    twin_detail::Binary(dst, src0, src1, count, "Min", [](auto a, auto b) { return a < b ? a : b; });
}
template <typename T, bool isSetMask = true> __aicore__ inline void Adds(const LocalTensor<T>& dst, const LocalTensor<T>& src, const T& scalarValue, const int32_t& count) {
    BCE_TWIN_ARITH(T, Adds);
    twin_detail::Scalar(dst, src, scalarValue, count, "Adds", [](auto a, auto b) { return a + b; });
}
template <typename T, bool isSetMask = true> __aicore__ inline void Muls(const LocalTensor<T>& dst, const LocalTensor<T>& src, const T& scalarValue, const int32_t& count) {
    BCE_TWIN_ARITH(T, Muls);
    twin_detail::Scalar(dst, src, scalarValue, count, "Muls", [](auto a, auto b) { return a * b; });
}
template <typename T, bool isSetMask = true> __aicore__ inline void Maxs(const LocalTensor<T>& dst, const LocalTensor<T>& src, const T& scalarValue, const int32_t& count) {
    BCE_TWIN_ARITH(T, Maxs);
    twin_detail::Scalar(dst, src, scalarValue, count, "Maxs", [](auto a, auto b) { return a > b ? a : b; });
}
template <typename T, bool isSetMask = true> __aicore__ inline void Mins(const LocalTensor<T>& dst, const LocalTensor<T>& src, const T& scalarValue, const int32_t& count) {
    BCE_TWIN_ARITH(T, Mins);
    twin_detail::Scalar(dst, src, scalarValue, count, "Mins", [](auto a, auto b) { return a < b ? a : b; });
}

namespace twin_detail {

/** A unary op: Scalar's checks and rounding, its scalar unused. */
template <typename T, typename F> void Unary(const LocalTensor<T>& dst, const LocalTensor<T>& src, int32_t count, const char* op, F f) {
    Scalar(dst, src, T(), count, op, [&](auto x, auto) { return f(x); });
}

}  // namespace twin_detail

/** Exp, Ln: the C library's correctly rounded-or-nearly results (the device's are its own approximations:
 *  a twin cannot know their last bits; the golden tests allow a few ulps). */
template <typename T> __aicore__ inline void Abs(const LocalTensor<T>& dst, const LocalTensor<T>& src, const int32_t& count) {
    BCE_TWIN_FARITH(T, Abs);
    twin_detail::Unary(dst, src, count, "Abs", [](auto a) { return std::fabs(a); });
}
template <typename T> __aicore__ inline void Exp(const LocalTensor<T>& dst, const LocalTensor<T>& src, const int32_t& count) {
    BCE_TWIN_FARITH(T, Exp);
    twin_detail::Unary(dst, src, count, "Exp", [](auto a) { return std::exp(a); });
}
template <typename T> __aicore__ inline void Ln(const LocalTensor<T>& dst, const LocalTensor<T>& src, const int32_t& count) {
    BCE_TWIN_FARITH(T, Ln);
    twin_detail::Unary(dst, src, count, "Ln", [](auto a) { return std::log(a); });
}

/**
 * ReduceSum, count form: the sum of src[0, count) to dst[0]. On A2 (ascendc-api.md s5.3, "mode 1") each
 * 256-B repeat is summed as a binary tree, then the repeats' sums are added in order: the twin adds in that
 * order (pairwise within a repeat), so its rounding follows the device's shape. sharedTmpBuffer is unused
 * there; it is checked as an operand.
 */
template <typename T, bool isSetMask = true>
__aicore__ inline void ReduceSum(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LocalTensor<T>& sharedTmpBuffer,
                                 const int32_t count) {
    BCE_TWIN_FARITH(T, ReduceSum);
    if (count < 1) twin::Fail("bad_count", twin::Format("ReduceSum with count %d (1 at least)", count));
    twin_detail::CheckVec(dst, 1, "ReduceSum", "dst");
    twin_detail::CheckVec(src, count, "ReduceSum", "src");
    twin_detail::CheckVec(sharedTmpBuffer, 1, "ReduceSum", "sharedTmpBuffer");
    constexpr int32_t kRepeat = 256 / static_cast<int32_t>(sizeof(T));
    const T* a = src.Data();
    float total = 0.0f;
    for (int32_t r = 0; r < count; r += kRepeat) {
        float lane[kRepeat];
        int32_t m = count - r < kRepeat ? count - r : kRepeat;
        for (int32_t i = 0; i < kRepeat; ++i) lane[i] = i < m ? static_cast<float>(a[r + i]) : 0.0f;
        for (int32_t width = kRepeat / 2; width >= 1; width /= 2) {
            for (int32_t i = 0; i < width; ++i) lane[i] = static_cast<float>(T(lane[2 * i] + lane[2 * i + 1]));
        }
        total = static_cast<float>(T(total + lane[0]));
    }
    dst.Data()[0] = T(total);
}

template <typename T> __aicore__ inline void Duplicate(const LocalTensor<T>& dst, const T& scalarValue, const int32_t& count) {
    static_assert(twin_detail::IsOneOf<T, int16_t, uint16_t, half, bfloat16_t, int32_t, uint32_t, float>(),
                  "Duplicate: unsupported dtype on A2");
    if (!twin_detail::Begin<T>(count, "Duplicate")) return;
    twin_detail::CheckVec(dst, count, "Duplicate", "dst");
    for (int32_t i = 0; i < count; ++i) dst.Data()[i] = scalarValue;
}

namespace twin_detail {

/** Is (src U -> dst T, mode) in the A2 Cast matrix (ascendc-api.md s5.1)? */
template <typename T, typename U> bool CastSupported(RoundMode m) {
    const bool five = m == RoundMode::CAST_RINT || m == RoundMode::CAST_FLOOR || m == RoundMode::CAST_CEIL ||
                      m == RoundMode::CAST_ROUND || m == RoundMode::CAST_TRUNC;
    const bool none = m == RoundMode::CAST_NONE;
    if (std::is_same<T, float>::value && (std::is_same<U, half>::value || std::is_same<U, bfloat16_t>::value ||
                                          std::is_same<U, int16_t>::value)) return none;
    if (std::is_same<U, float>::value && std::is_same<T, half>::value) return five || none || m == RoundMode::CAST_ODD;
    if (std::is_same<U, float>::value && std::is_same<T, bfloat16_t>::value) return five;
    if (std::is_same<U, float>::value && (std::is_same<T, int32_t>::value || std::is_same<T, int16_t>::value ||
                                          std::is_same<T, float>::value)) return five;
    if (std::is_same<U, half>::value && (std::is_same<T, int32_t>::value || std::is_same<T, int16_t>::value)) return five;
    if (std::is_same<U, int32_t>::value && std::is_same<T, float>::value) return five || none;
    if (std::is_same<U, int32_t>::value && std::is_same<T, int16_t>::value) return none;
    if (std::is_same<U, int16_t>::value && std::is_same<T, half>::value) return five || none;
    return false;
}

inline double RoundInt(double x, RoundMode m) {
    switch (m) {
        case RoundMode::CAST_FLOOR: return std::floor(x);
        case RoundMode::CAST_CEIL: return std::ceil(x);
        case RoundMode::CAST_ROUND: return std::round(x);
        case RoundMode::CAST_TRUNC: return std::trunc(x);
        default: return std::nearbyint(x);
    }
}

/** float -> 16-bit float with mode m: the RNE result, moved one step when the mode wants the other neighbour. */
template <typename T> T RoundTo16(float x, RoundMode m) {
    T r(x);
    float rf = static_cast<float>(r);
    if (std::isnan(x) || std::isinf(x) || rf == x) return r;
    const bool half16 = std::is_same<T, half>::value;
    const uint16_t maxFinite = half16 ? 0x7BFF : 0x7F7F;
    if (std::isinf(rf)) {  // saturation mode: overflow clamps to the largest finite value
        return T::FromBits(static_cast<uint16_t>((r.val & 0x8000u) | maxFinite));
    }
    // the neighbour on the other side of x (magnitudes are monotone in the bits)
    bool rAbove = std::fabs(rf) > std::fabs(x);
    uint16_t otherBits = static_cast<uint16_t>(rAbove ? r.val - 1 : r.val + 1);
    if ((r.val & 0x7FFFu) == 0 && !rAbove) otherBits = static_cast<uint16_t>((x < 0 ? 0x8000u : 0u) | 1u);
    T other = T::FromBits(otherBits);
    if ((other.val & 0x7FFFu) > maxFinite) other = r;
    T toward = rAbove ? other : r;  // toward zero
    T away = rAbove ? r : other;
    switch (m) {
        case RoundMode::CAST_TRUNC: return toward;
        case RoundMode::CAST_FLOOR: return x > 0 ? toward : away;
        case RoundMode::CAST_CEIL: return x > 0 ? away : toward;
        case RoundMode::CAST_ROUND: {
            double dt = std::fabs(static_cast<double>(x) - static_cast<float>(toward));
            double da = std::fabs(static_cast<double>(static_cast<float>(away)) - x);
            return da <= dt ? away : toward;
        }
        case RoundMode::CAST_ODD: return (toward.val & 1u) ? toward : away;
        default: return r;
    }
}

template <typename T, typename U> T CastElem(U v, RoundMode m) {
    if constexpr (std::is_same<T, half>::value || std::is_same<T, bfloat16_t>::value) {
        return RoundTo16<T>(static_cast<float>(v), m);
    } else if constexpr (std::is_integral<T>::value) {
        double x = RoundInt(static_cast<double>(static_cast<float>(v)), m);
        double lo = static_cast<double>(std::numeric_limits<T>::min());
        double hi = static_cast<double>(std::numeric_limits<T>::max());
        if (std::isnan(x)) return 0;
        return static_cast<T>(x < lo ? lo : (x > hi ? hi : x));
    } else if constexpr (std::is_same<T, float>::value && std::is_same<U, float>::value) {
        return static_cast<float>(RoundInt(v, m));
    } else if constexpr (std::is_same<T, float>::value && std::is_integral<U>::value) {
        if (m == RoundMode::CAST_NONE || m == RoundMode::CAST_RINT) return static_cast<float>(v);
        return static_cast<float>(static_cast<double>(v));  // int32 magnitudes below 2^24 are exact
    } else {
        return static_cast<T>(static_cast<float>(v));
    }
}

inline const char* ModeName(RoundMode m) {
    static const char* names[] = {"CAST_NONE", "CAST_RINT", "CAST_FLOOR", "CAST_CEIL", "CAST_ROUND", "CAST_TRUNC", "CAST_ODD"};
    const size_t i = static_cast<size_t>(m);
    return i < sizeof(names) / sizeof(names[0]) ? names[i] : "an unknown RoundMode";
}

}  // namespace twin_detail

/** Cast count elements of src (U) into dst (T) with roundMode; only the A2 pairs and modes. */
template <typename T, typename U>
__aicore__ inline void Cast(const LocalTensor<T>& dst, const LocalTensor<U>& src, const RoundMode& roundMode, const uint32_t count) {
    if (!twin_detail::CastSupported<T, U>(roundMode)) {
        twin::Fail("cast_unsupported", twin::Format("Cast %s -> %s with %s is not supported on A2",
                                                    twin_detail::TypeName<U>(), twin_detail::TypeName<T>(),
                                                    twin_detail::ModeName(roundMode)));
    }
    if (count == 0) return;
    int32_t n = static_cast<int32_t>(count);
    twin_detail::Begin<T>(n, "Cast");
    twin_detail::CheckVec(dst, n, "Cast", "dst");
    twin_detail::CheckVec(src, n, "Cast", "src");
    if (dst.Raw() == src.Raw() ? sizeof(T) != sizeof(U) : twin_detail::PartialOverlap(dst.Raw(), count * sizeof(T), src.Raw(), count * sizeof(U))) {
        twin::Fail("partial_overlap", "Cast: widening or narrowing in place / with overlapping operands");
    }
    for (uint32_t i = 0; i < count; ++i) dst.Data()[i] = twin_detail::CastElem<T, U>(src.Data()[i], roundMode);
}

// Scalar conversions: CANN 8.x names and the 9.x Cast overloads.
__aicore__ inline float ToFloat(const bfloat16_t& bVal) { return static_cast<float>(bVal); }
__aicore__ inline bfloat16_t ToBfloat16(const float& fVal) { return bfloat16_t(fVal); }
__aicore__ inline float Cast(const bfloat16_t& bVal) { return static_cast<float>(bVal); }
__aicore__ inline bfloat16_t Cast(const float& fVal) { return bfloat16_t(fVal); }

}  // namespace AscendC

#endif  // BCE_TWIN_KERNEL_OPERATOR_H
