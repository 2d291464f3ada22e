// benchmarks/refit_ab.py's driver: two builds of the re-fit (A and B, refit_ab_side.cpp) in one process,
// timed call by call, interleaved (which side goes first alternates), each call the least of 3 x 3 timings.
// Prints whether every pick agrees, both sides' percentiles, and B's time over A's on the slowest 2% of
// calls (by A) and on all: a ratio measured side by side, which a shared machine's drift hits alike.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

extern "C" void A_Setup(int);
extern "C" double A_Time(int, int);
extern "C" void A_Pick(int, int64_t*, int64_t*);
extern "C" void B_Setup(int);
extern "C" double B_Time(int, int);
extern "C" void B_Pick(int, int64_t*, int64_t*);

namespace {
double Percentile(std::vector<double> v, double q) {
    std::sort(v.begin(), v.end());
    return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))];
}
}  // namespace

int main(int argc, char** argv) {
    const int n = argc > 1 ? std::atoi(argv[1]) : 2000;
    if (n < 50) {
        std::fprintf(stderr, "usage: refit_ab [cases >= 50]\n");
        return 2;
    }
    A_Setup(n);
    B_Setup(n);
    int differ = 0;
    std::vector<double> rangesA(n), rangesB(n);
    for (int i = 0; i < n; ++i) {
        int64_t a[4], b[4], ra = 0, rb = 0;
        A_Pick(i, a, &ra);
        B_Pick(i, b, &rb);
        differ += !std::equal(a, a + 4, b);
        rangesA[i] = static_cast<double>(ra);
        rangesB[i] = static_cast<double>(rb);
    }
    std::vector<double> ta(n), tb(n);
    for (int round = 0; round < 3; ++round) {
        for (int i = 0; i < n; ++i) {
            double x, y;
            if ((i + round) % 2) {
                x = A_Time(i, 3);
                y = B_Time(i, 3);
            } else {
                y = B_Time(i, 3);
                x = A_Time(i, 3);
            }
            ta[i] = round ? std::min(ta[i], x) : x;
            tb[i] = round ? std::min(tb[i], y) : y;
        }
    }
    std::vector<int> order(n);
    for (int i = 0; i < n; ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](int p, int q) { return ta[p] < ta[q]; });
    double tailA = 0, tailB = 0, allA = 0, allB = 0;
    for (int j = n * 98 / 100; j < n; ++j) {
        tailA += ta[order[j]];
        tailB += tb[order[j]];
    }
    for (int i = 0; i < n; ++i) {
        allA += ta[i];
        allB += tb[i];
    }
    std::printf("%d calls, picks that differ: %d\n", n, differ);
    std::printf("A: first call median %.0f ns, p90 %.0f ns, p99 %.0f ns; ranges p99 %.0f\n", Percentile(ta, 0.5),
                Percentile(ta, 0.9), Percentile(ta, 0.99), Percentile(rangesA, 0.99));
    std::printf("B: first call median %.0f ns, p90 %.0f ns, p99 %.0f ns; ranges p99 %.0f\n", Percentile(tb, 0.5),
                Percentile(tb, 0.9), Percentile(tb, 0.99), Percentile(rangesB, 0.99));
    std::printf("B / A: slowest 2%% of calls (by A) %.3f, all calls %.3f\n", tailB / tailA, allB / allA);
    return differ ? 1 : 0;
}
