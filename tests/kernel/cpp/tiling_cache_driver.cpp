// Drives kernel/npu_ext/tiling_cache.h (the NPU operator's device-tiling LRU) on the host: each check
// prints "name ok" or "name FAIL ..."; tests/kernel/test_tiling_cache.py reads them.
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "tiling_cache.h"

namespace {
int failures = 0;
void Expect(bool ok, const char* name, const std::string& detail = "") {
    std::printf("%s %s %s\n", name, ok ? "ok" : "FAIL", detail.c_str());
    failures += ok ? 0 : 1;
}
}  // namespace

int main() {
    bce_grad::LruCache<std::string, int> c(2);
    Expect(!c.Get("a").has_value(), "miss_on_empty");
    c.Put("a", 1);
    c.Put("b", 2);
    Expect(c.Get("a").value_or(-1) == 1, "hit_returns_value");
    c.Put("c", 3);  // over capacity: b is the least recently used (a was just read)
    Expect(!c.Get("b").has_value(), "evicts_least_recently_used");
    Expect(c.Get("a").value_or(-1) == 1 && c.Get("c").value_or(-1) == 3, "keeps_recent");
    c.Put("a", 10);
    Expect(c.Get("a").value_or(-1) == 10 && c.Stats().size == 2, "put_replaces_in_place");
    bce_grad::CacheStats s = c.Stats();
    Expect(s.hits == 4 && s.misses == 2 && s.evictions == 1 && s.capacity == 2, "counts",
           std::to_string(s.hits) + "/" + std::to_string(s.misses) + "/" + std::to_string(s.evictions));
    c.SetCapacity(1);
    Expect(c.Stats().size == 1 && c.Get("a").has_value(), "shrink_keeps_most_recent");
    c.Clear();
    Expect(c.Stats().size == 0 && !c.Get("a").has_value(), "clear");
    bce_grad::LruCache<int, int> zero(0);
    zero.Put(1, 1);
    Expect(zero.Stats().capacity == 1 && zero.Get(1).has_value(), "capacity_at_least_one");

    // many threads reading and writing one small cache: every hit returns the value its key was given
    bce_grad::LruCache<int, int> shared(16);
    std::vector<std::thread> threads;
    std::vector<int> wrong(8, 0);
    for (int t = 0; t < 8; ++t) {
        threads.emplace_back([&shared, &wrong, t] {
            for (int i = 0; i < 20000; ++i) {
                int key = (i * 7 + t) % 64;
                auto v = shared.Get(key);
                if (v.has_value() && *v != key * 3) {
                    ++wrong[t];
                }
                if (!v.has_value()) {
                    shared.Put(key, key * 3);
                }
            }
        });
    }
    for (auto& th : threads) {
        th.join();
    }
    int bad = 0;
    for (int w : wrong) {
        bad += w;
    }
    bce_grad::CacheStats st = shared.Stats();
    Expect(bad == 0 && st.size <= 16 && st.hits + st.misses == 8 * 20000, "concurrent",
           std::to_string(bad) + " wrong, size " + std::to_string(st.size));
    return failures == 0 ? 0 : 1;
}
