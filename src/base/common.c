/* common.c - error reporting, checked allocation, clocks. */
#include "base/common.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

bool nx_fail(nx_err *err, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return false;
}

bool nx_fail_prefix(nx_err *err, const char *fmt, ...) {
    if (err) {
        char prefix[NX_ERR_MAX], old[NX_ERR_MAX];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(prefix, sizeof prefix, fmt, ap);
        va_end(ap);
        memcpy(old, err->msg, sizeof old);
        snprintf(err->msg, sizeof err->msg, "%s: %s", prefix, old);
    }
    return false;
}

void *nx_malloc(size_t n, const char *what, nx_err *err) {
    void *p = malloc(n ? n : 1);
    if (!p) nx_fail(err, "out of memory allocating %zu bytes for %s", n, what);
    return p;
}

void *nx_calloc(size_t count, size_t size, const char *what, nx_err *err) {
    uint64_t total;
    if (!nx_mul_ok(count, size, &total)) {
        nx_fail(err, "size overflow allocating %zu x %zu bytes for %s", count, size, what);
        return NULL;
    }
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) nx_fail(err, "out of memory allocating %llu bytes for %s", (unsigned long long)total, what);
    return p;
}

void *nx_alloc_aligned(size_t n, const char *what, nx_err *err) {
    size_t rounded = (n + 63) & ~(size_t)63;
    if (rounded < n) {
        nx_fail(err, "size overflow allocating %zu bytes for %s", n, what);
        return NULL;
    }
    void *p = aligned_alloc(64, rounded ? rounded : 64);
    if (!p) {
        nx_fail(err, "out of memory allocating %zu bytes for %s", n, what);
        return NULL;
    }
    memset(p, 0, rounded ? rounded : 64);
    return p;
}

void nx_free_aligned(void *p) { free(p); }

double nx_time_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double nx_thread_time_s(void) {
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return nx_time_s();
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

uint64_t nx_peak_rss_bytes(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (uint64_t)ru.ru_maxrss * 1024u; /* Linux reports KiB */
}

_Noreturn void nx_assert_fail(const char *file, int line, const char *cond, const char *fmt, ...) {
    fprintf(stderr, "nextn: internal check failed: %s:%d: %s: ", file, line, cond);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    abort();
}
