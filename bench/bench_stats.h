/* Order statistics shared by the benchmarks (header only). */
#ifndef MC_BENCH_STATS_H
#define MC_BENCH_STATS_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

/* qsort comparator for uint64_t, ascending. */
static inline int mc_bench_cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* qsort comparator for double, ascending. */
static inline int mc_bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* a / b, 0 when b is not positive (a peer or engine that measured nothing). */
static inline double mc_bench_ratio(double a, double b)
{
    return b > 0 ? a / b : 0;
}

/* The mean of two measurements taken around a run (before, after); 0 unless both are
 * positive. */
static inline double mc_bench_mean2(double before, double after)
{
    return before > 0 && after > 0 ? (before + after) / 2 : 0;
}

/* Sorts v (nanoseconds) in place and returns its p-quantile (index p * (n - 1)) in
 * microseconds; 0 when n is 0. */
static inline double mc_bench_pct_us(uint64_t *v, size_t n, double p)
{
    if (!n)
        return 0;
    qsort(v, n, sizeof(*v), mc_bench_cmp_u64);
    return (double)v[(size_t)(p * (double)(n - 1))] / 1000.0;
}

#endif
