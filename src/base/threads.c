/* threads.c - fixed worker pool (see threads.h).
 *
 * Protocol.  The pool has one owner thread (the caller of nx_pool_run, which acts as thread 0);
 * nx_pool_run is not reentrant and must not be called from inside a task.  A run publishes
 * (fn, ctx), then bumps `generation`.  Each worker remembers the last generation it ran; it
 * spins a short while watching `generation`, then sleeps on `wake` under `mutex`.  The owner
 * bumps `generation` before taking `mutex` to broadcast, and a worker re-checks `generation`
 * under `mutex` before waiting, so a wake-up cannot be lost.  Each worker increments
 * `n_done` (release) after its task; the owner runs its own share, then spins (with pause,
 * then yield) until n_done == size - 1 (acquire), so everything the tasks wrote is visible to
 * the owner when nx_pool_run returns.
 *
 * nx_parallel_for splits [0, n) into a fixed list of chunks that depends only on (n, grain,
 * pool size); each thread owns a contiguous run of them and the threads that finish first take
 * the others' remaining chunks: which thread runs a chunk varies, the chunk boundaries do not,
 * so any per-chunk computation is reproducible.  Taking chunks dynamically keeps all cores busy
 * when the machine is shared and a thread is descheduled.
 */
#include "base/threads.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

/* Spin iterations (each a pause, ~40-140 cycles) before a worker sleeps: long enough to cover
 * the gap between the small kernels of one decode step, short enough not to burn a shared core. */
#define SPIN_BEFORE_SLEEP 1000
#define NX_MAX_THREADS 512

struct nx_pool {
    int size;
    pthread_t *threads;
    struct worker_arg *args;

    pthread_mutex_t mutex;
    pthread_cond_t wake;
    atomic_uint generation; /* bumped once per run */
    atomic_int n_done;      /* workers finished with the current generation */
    atomic_bool stop;

    nx_task_fn fn; /* written by the owner before the generation bump, read by workers after */
    void *ctx;
};

struct worker_arg {
    nx_pool *pool;
    int ith;
};

static void *worker_main(void *p) {
    struct worker_arg *arg = p;
    nx_pool *pool = arg->pool;
    unsigned seen = 0;
    for (;;) {
        unsigned gen = atomic_load_explicit(&pool->generation, memory_order_acquire);
        for (int spin = 0; gen == seen && spin < SPIN_BEFORE_SLEEP; spin++) {
            cpu_relax();
            gen = atomic_load_explicit(&pool->generation, memory_order_acquire);
        }
        if (gen == seen) {
            pthread_mutex_lock(&pool->mutex);
            while ((gen = atomic_load_explicit(&pool->generation, memory_order_acquire)) == seen &&
                   !atomic_load(&pool->stop))
                pthread_cond_wait(&pool->wake, &pool->mutex);
            pthread_mutex_unlock(&pool->mutex);
        }
        if (atomic_load(&pool->stop)) return NULL;
        seen = gen;
        pool->fn(pool->ctx, arg->ith, pool->size);
        atomic_fetch_add_explicit(&pool->n_done, 1, memory_order_release);
    }
}

int nx_default_threads(void) {
    const char *env = getenv("NEXTN_THREADS");
    if (env && *env) {
        char *end;
        errno = 0;
        long v = strtol(env, &end, 10);
        if (errno == 0 && *end == '\0' && v >= 1 && v <= NX_MAX_THREADS) return (int)v;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1) return 1;
    return n > NX_MAX_THREADS ? NX_MAX_THREADS : (int)n;
}

nx_pool *nx_pool_create(int n_threads, nx_err *err) {
    if (n_threads <= 0) n_threads = nx_default_threads();
    if (n_threads > NX_MAX_THREADS) {
        nx_fail(err, "thread count %d exceeds the limit of %d", n_threads, NX_MAX_THREADS);
        return NULL;
    }
    nx_pool *p = nx_calloc(1, sizeof *p, "thread pool", err);
    if (!p) return NULL;
    p->size = n_threads;
    atomic_init(&p->generation, 0);
    atomic_init(&p->n_done, 0);
    atomic_init(&p->stop, false);
    pthread_mutex_init(&p->mutex, NULL);
    pthread_cond_init(&p->wake, NULL);
    p->threads = nx_calloc((size_t)n_threads, sizeof *p->threads, "thread pool handles", err);
    p->args = nx_calloc((size_t)n_threads, sizeof *p->args, "thread pool arguments", err);
    if (!p->threads || !p->args) {
        free(p->threads);
        free(p->args);
        free(p);
        return NULL;
    }
    for (int i = 1; i < n_threads; i++) {
        p->args[i].pool = p;
        p->args[i].ith = i;
        int rc = pthread_create(&p->threads[i], NULL, worker_main, &p->args[i]);
        if (rc != 0) {
            nx_fail(err, "cannot start worker thread %d of %d (error %d)", i, n_threads, rc);
            p->size = i; /* free only the started ones */
            nx_pool_free(p);
            return NULL;
        }
    }
    return p;
}

void nx_pool_free(nx_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mutex);
    atomic_store(&p->stop, true);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mutex);
    for (int i = 1; i < p->size; i++) pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mutex);
    pthread_cond_destroy(&p->wake);
    free(p->threads);
    free(p->args);
    free(p);
}

int nx_pool_size(const nx_pool *p) { return p ? p->size : 1; }

void nx_pool_run(nx_pool *p, nx_task_fn fn, void *ctx) {
    if (!p || p->size == 1) {
        fn(ctx, 0, 1);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    atomic_store_explicit(&p->n_done, 0, memory_order_relaxed);
    atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
    pthread_mutex_lock(&p->mutex);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mutex);

    fn(ctx, 0, p->size);

    const int want = p->size - 1;
    for (int spin = 0; atomic_load_explicit(&p->n_done, memory_order_acquire) < want; spin++) {
        if (spin < SPIN_BEFORE_SLEEP) cpu_relax();
        else sched_yield(); /* a worker was descheduled: give it the core */
    }
}

/* ---- parallel for -------------------------------------------------------------------------- */

/* Chunks per thread when there is enough work: more than one so a slow (descheduled) thread
 * delays the end by a fraction of its share only. */
#define CHUNKS_PER_THREAD 16

/* Thread i owns the contiguous chunks [i*c/nth, (i+1)*c/nth) and runs them in address order
 * from the front, so its rows form one long weight stream for the hardware prefetcher and the
 * kernels' prefetch-ahead (chunks handed out in a global order gave each thread a new short
 * stream per chunk: 0.8b Q4_K_M decode 8-15 % slower at two threads).  A thread that has run
 * its own chunks takes the remaining ones of the others from their back end.  Each slot packs
 * (front, back) into one word changed only by compare-and-swap, so every chunk runs once. */
struct pfor_slot {
    _Alignas(64) atomic_ullong fb; /* low 32 bits: next chunk from the front; high: end */
};

struct pfor_ctx {
    int64_t n, n_chunks;
    int nth;
    struct pfor_slot *slot;
    void (*fn)(void *ctx, int64_t begin, int64_t end);
    void *ctx;
};

static void pfor_chunk(const struct pfor_ctx *pc, int64_t k) {
    /* chunk k covers [k*n/c, (k+1)*n/c): sizes differ by at most one */
    int64_t begin = (int64_t)((__int128)k * pc->n / pc->n_chunks);
    int64_t end = (int64_t)((__int128)(k + 1) * pc->n / pc->n_chunks);
    pc->fn(pc->ctx, begin, end);
}

/* Takes slot s's next chunk from the front (own == true) or its last chunk; -1 when empty. */
static int64_t pfor_take(struct pfor_slot *s, bool own) {
    unsigned long long v = atomic_load_explicit(&s->fb, memory_order_relaxed);
    for (;;) {
        unsigned long long f = v & 0xffffffffu, b = v >> 32;
        if (f >= b) return -1;
        unsigned long long nv = own ? v + 1 : ((b - 1) << 32) | f;
        if (atomic_compare_exchange_weak_explicit(&s->fb, &v, nv, memory_order_relaxed, memory_order_relaxed))
            return (int64_t)(own ? f : b - 1);
    }
}

static void pfor_task(void *c, int ith, int nth) {
    struct pfor_ctx *pc = c;
    (void)nth;
    for (int64_t k; (k = pfor_take(&pc->slot[ith], true)) >= 0;) pfor_chunk(pc, k);
    for (int d = 1; d < pc->nth; d++) {
        struct pfor_slot *victim = &pc->slot[(ith + d) % pc->nth];
        for (int64_t k; (k = pfor_take(victim, false)) >= 0;) pfor_chunk(pc, k);
    }
}

void nx_parallel_for(nx_pool *p, int64_t n, int64_t grain, void (*fn)(void *ctx, int64_t begin, int64_t end),
                     void *ctx) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    const int nth = nx_pool_size(p);
    int64_t max_chunks = n / grain; /* every chunk keeps at least `grain` items */
    int64_t n_chunks = (int64_t)nth * CHUNKS_PER_THREAD;
    if (n_chunks > max_chunks) n_chunks = max_chunks;
    if (n_chunks <= 1 || nth == 1) {
        fn(ctx, 0, n);
        return;
    }
    struct pfor_slot slot[nth]; /* nth <= NX_MAX_THREADS: at most 32 KiB */
    for (int i = 0; i < nth; i++) {
        unsigned long long f = (unsigned long long)(i * n_chunks / nth);
        unsigned long long b = (unsigned long long)((i + 1) * n_chunks / nth);
        atomic_init(&slot[i].fb, (b << 32) | f);
    }
    struct pfor_ctx pc = {.n = n, .n_chunks = n_chunks, .nth = nth, .slot = slot, .fn = fn, .ctx = ctx};
    nx_pool_run(p, pfor_task, &pc);
}
