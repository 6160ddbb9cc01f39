/* bench_util.h - what the benchmarks share: clocks and the median. */
#ifndef NX_BENCH_UTIL_H
#define NX_BENCH_UTIL_H

#include <stdlib.h>
#include <time.h>

/* Seconds on a clock: CLOCK_MONOTONIC (wall), CLOCK_PROCESS_CPUTIME_ID (CPU of all threads:
 * on a shared machine wall time also counts waiting for a core, CPU time does not),
 * CLOCK_THREAD_CPUTIME_ID (CPU of the calling thread). */
static inline double bu_seconds(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline int bu_cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorts v[0..n) ascending (so v[0] is the minimum) and returns the median (the mean of the two
 * middle values when n is even). */
static inline double bu_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, bu_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#endif
