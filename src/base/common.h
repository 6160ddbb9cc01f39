/* common.h - error reporting and small helpers shared by every module.
 *
 * Error convention: a library function that can fail returns bool (true = success) and takes
 * an `nx_err *` as its last argument.  On failure it fills the message, which always names the
 * file / field / limit involved ("model.gguf: tensor 'blk.3.ffn_up.weight' ..."), and returns
 * false.  `err` may be NULL when the caller does not want the text.  Library code never exits
 * and never prints errors itself; only cli/main.c decides what to do with them.
 */
#ifndef NX_COMMON_H
#define NX_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NX_ERR_MAX 1024

typedef struct nx_err {
    char msg[NX_ERR_MAX];
} nx_err;

/* Formats the message into err (if non-NULL) and returns false, so callers can write
 * `return nx_fail(err, "%s: bad magic", path);`. */
bool nx_fail(nx_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Progress of a long operation (converting, quantising, writing, loading), reported to the
 * caller's callback: library and tool code never prints.  item (1-based: the one in progress)
 * of n_items, 0 when unknown; bytes of total_bytes processed so far. */
typedef struct nx_progress {
    uint64_t item, n_items;
    uint64_t bytes, total_bytes;
    const char *name;   /* the current item, e.g. a tensor name; may be NULL */
    const char *note;   /* a detail, e.g. the target type; may be NULL */
} nx_progress;
typedef void (*nx_progress_fn)(void *user, const nx_progress *p);

/* Prepends "prefix: " to an existing message (used to add context while unwinding). */
bool nx_fail_prefix(nx_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Allocation helpers that report out-of-memory through err with the size and purpose.
 * They return NULL on failure (and on n == 0 they still return a valid unique pointer). */
void *nx_malloc(size_t n, const char *what, nx_err *err);
void *nx_calloc(size_t count, size_t size, const char *what, nx_err *err);
/* 64-byte aligned, zeroed; free with nx_free_aligned. */
void *nx_alloc_aligned(size_t n, const char *what, nx_err *err);
void  nx_free_aligned(void *p);

/* Overflow-checked arithmetic on sizes: return false on overflow. */
static inline bool nx_mul_ok(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
static inline bool nx_add_ok(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_add_overflow(a, b, out);
}

/* Monotonic wall clock in seconds. */
double nx_time_s(void);

/* CPU seconds of the calling thread (excludes the time it was descheduled; falls back to the
 * wall clock where the thread clock is unavailable). */
double nx_thread_time_s(void);

/* Peak resident set size of this process in bytes (0 if unknown). */
uint64_t nx_peak_rss_bytes(void);

#define NX_MIN(a, b) ((a) < (b) ? (a) : (b))
#define NX_MAX(a, b) ((a) > (b) ? (a) : (b))
#define NX_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* NX_ASSERT(cond, fmt, ...): an internal invariant (a bug in nextn if false, never bad input:
 * that is an nx_err).  Checked builds (NX_CHECKS: Debug, sanitizer builds and -DNEXTN_CHECKS=ON,
 * see CMakeLists.txt) evaluate cond and, when it is false, print "file:line: cond: message" on
 * stderr and abort; other builds compile it out without evaluating cond.  The invariant checks
 * that tests also call directly (nx_spec_check ...) run through it after the operations that
 * must keep them. */
#ifdef NX_CHECKS
#define NX_ASSERT(cond, ...) \
    do { if (!(cond)) nx_assert_fail(__FILE__, __LINE__, #cond, __VA_ARGS__); } while (0)
#else
#define NX_ASSERT(cond, ...) \
    do { (void)sizeof(!(cond)); } while (0)
#endif
_Noreturn void nx_assert_fail(const char *file, int line, const char *cond, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
