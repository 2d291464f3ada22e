/**
 * A bounded least-recently-used map, thread-safe: the NPU operator's cache of tilings already on the
 * device (key: everything the tiling depends on; value: the device buffer holding the struct).
 * Header-only and free of torch so the host tests build it with plain g++
 * (tests/kernel/cpp/tiling_cache_driver.cpp).
 */
#ifndef BCE_GRAD_TILING_CACHE_H
#define BCE_GRAD_TILING_CACHE_H

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>

namespace bce_grad {

struct CacheStats {
    uint64_t hits = 0;
    uint64_t misses = 0;
    uint64_t evictions = 0;
    std::size_t size = 0;
    std::size_t capacity = 0;
};

template <typename Key, typename Value, typename Hash = std::hash<Key>>
class LruCache {
public:
    explicit LruCache(std::size_t capacity) : capacity_(capacity == 0 ? 1 : capacity) {}

    /** The value under ``key`` (now the most recently used), or nothing; counts a hit or a miss. */
    std::optional<Value> Get(const Key& key) {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = index_.find(key);
        if (it == index_.end()) {
            ++stats_.misses;
            return std::nullopt;
        }
        order_.splice(order_.begin(), order_, it->second);
        ++stats_.hits;
        return it->second->second;
    }

    /** Insert or replace ``key``; the least recently used entries go while over capacity. */
    void Put(const Key& key, Value value) {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = index_.find(key);
        if (it != index_.end()) {
            it->second->second = std::move(value);
            order_.splice(order_.begin(), order_, it->second);
            return;
        }
        order_.emplace_front(key, std::move(value));
        index_.emplace(key, order_.begin());
        Trim();
    }

    void Clear() {
        std::lock_guard<std::mutex> lock(mu_);
        index_.clear();
        order_.clear();
    }

    void SetCapacity(std::size_t capacity) {
        std::lock_guard<std::mutex> lock(mu_);
        capacity_ = capacity == 0 ? 1 : capacity;
        Trim();
    }

    CacheStats Stats() const {
        std::lock_guard<std::mutex> lock(mu_);
        CacheStats s = stats_;
        s.size = order_.size();
        s.capacity = capacity_;
        return s;
    }

private:
    using Item = std::pair<Key, Value>;

    void Trim() {
        while (order_.size() > capacity_) {
            index_.erase(order_.back().first);
            order_.pop_back();
            ++stats_.evictions;
        }
    }

    std::size_t capacity_;
    std::list<Item> order_;  // most recently used first
    std::unordered_map<Key, typename std::list<Item>::iterator, Hash> index_;
    CacheStats stats_;
    mutable std::mutex mu_;
};

}  // namespace bce_grad

#endif  // BCE_GRAD_TILING_CACHE_H
