/* threads.h - a fixed pool of worker threads and a parallel-for.
 *
 * The pool is created once (size from -t N, else NEXTN_THREADS, else the number of online
 * CPUs) and reused by every kernel.  nx_pool_run() wakes the workers, runs fn on every thread
 * (the caller is thread 0) and returns when all are done; workers spin briefly before
 * sleeping so the many small ops of a decode step do not pay a futex round-trip each.
 * The pool is the only shared mutable state in the engine.
 */
#ifndef NX_THREADS_H
#define NX_THREADS_H

#include "base/common.h"

typedef struct nx_pool nx_pool;

/* ith in [0, nth). */
typedef void (*nx_task_fn)(void *ctx, int ith, int nth);

/* Thread ith's share [*b, *e) of n items: contiguous chunks of ceil(n / nth). */
static inline void nx_task_range(int64_t n, int ith, int nth, int64_t *b, int64_t *e) {
    const int64_t per = (n + nth - 1) / nth;
    *b = NX_MIN(n, per * ith);
    *e = NX_MIN(n, *b + per);
}

nx_pool *nx_pool_create(int n_threads, nx_err *err);  /* n_threads <= 0: default */
void     nx_pool_free(nx_pool *p);
int      nx_pool_size(const nx_pool *p);
void     nx_pool_run(nx_pool *p, nx_task_fn fn, void *ctx);
/* Splits [0, n) into contiguous chunks of at least `grain` items, one or more per thread. */
void     nx_parallel_for(nx_pool *p, int64_t n, int64_t grain,
                         void (*fn)(void *ctx, int64_t begin, int64_t end), void *ctx);
/* Default thread count: NEXTN_THREADS if set and valid, else online CPUs. */
int      nx_default_threads(void);

#endif
