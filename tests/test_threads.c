/* test_threads.c - the worker pool: every thread runs each task once, parallel_for covers every
 * index exactly once with chunks >= grain, each thread runs its own chunks in order and then the
 * others' from the back, runs reuse the same threads, NEXTN_THREADS works. */
#include "testutil.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/threads.h"

struct run_ctx {
    atomic_int calls;
    atomic_int seen_mask;
    int nth_seen;
};

static void count_task(void *c, int ith, int nth) {
    struct run_ctx *rc = c;
    atomic_fetch_add(&rc->calls, 1);
    atomic_fetch_or(&rc->seen_mask, 1 << ith);
    rc->nth_seen = nth;
}

static void test_run_calls_every_thread_once(void **state) {
    (void)state;
    for (int n = 1; n <= 5; n++) {
        nx_err e;
        nx_pool *p = nx_pool_create(n, &e);
        assert_non_null(p);
        assert_int_equal(nx_pool_size(p), n);
        for (int rep = 0; rep < 50; rep++) {
            struct run_ctx rc = {0};
            nx_pool_run(p, count_task, &rc);
            assert_int_equal(atomic_load(&rc.calls), n);
            assert_int_equal(atomic_load(&rc.seen_mask), (1 << n) - 1);
            assert_int_equal(rc.nth_seen, n);
        }
        nx_pool_free(p);
    }
    nx_pool_free(NULL);
}

struct cover_ctx {
    atomic_int *hits;
    int64_t grain, n;
    atomic_int bad_chunks;
};

static void cover_fn(void *c, int64_t begin, int64_t end) {
    struct cover_ctx *cc = c;
    /* a chunk is smaller than grain only when the whole range is */
    if (begin < 0 || end > cc->n || begin >= end || (end - begin < cc->grain && end - begin != cc->n))
        atomic_fetch_add(&cc->bad_chunks, 1);
    for (int64_t i = begin; i < end && i < cc->n && i >= 0; i++) atomic_fetch_add(&cc->hits[i], 1);
}

static void test_parallel_for_covers_each_index_once(void **state) {
    (void)state;
    const int64_t ns[] = {0, 1, 2, 3, 7, 16, 17, 100, 1000, 4097};
    const int64_t grains[] = {0, 1, 2, 5, 64, 5000};
    for (int nthreads = 1; nthreads <= 4; nthreads++) {
        nx_pool *p = nx_pool_create(nthreads, NULL);
        assert_non_null(p);
        for (size_t a = 0; a < NX_ARRAY_LEN(ns); a++) {
            for (size_t b = 0; b < NX_ARRAY_LEN(grains); b++) {
                int64_t n = ns[a];
                struct cover_ctx cc = {.grain = grains[b] < 1 ? 1 : grains[b], .n = n};
                cc.hits = calloc((size_t)n + 1, sizeof *cc.hits);
                nx_parallel_for(p, n, grains[b], cover_fn, &cc);
                for (int64_t i = 0; i < n; i++) {
                    if (atomic_load(&cc.hits[i]) != 1) {
                        print_error("threads=%d n=%lld grain=%lld: index %lld hit %d times\n", nthreads,
                                    (long long)n, (long long)grains[b], (long long)i, atomic_load(&cc.hits[i]));
                        fail();
                    }
                }
                assert_int_equal(atomic_load(&cc.bad_chunks), 0);
                free(cc.hits);
            }
        }
        nx_pool_free(p);
    }
}

/* Chunk boundaries depend only on (n, grain, pool size): record them twice and compare. */
struct bounds_ctx {
    atomic_int count;
    int64_t begins[64];
};

static void bounds_fn(void *c, int64_t begin, int64_t end) {
    (void)end;
    struct bounds_ctx *bc = c;
    int k = atomic_fetch_add(&bc->count, 1);
    if (k < 64) bc->begins[k] = begin;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void test_parallel_for_chunks_are_deterministic(void **state) {
    (void)state;
    nx_pool *p = nx_pool_create(3, NULL);
    struct bounds_ctx a = {0}, b = {0};
    nx_parallel_for(p, 1000, 10, bounds_fn, &a);
    nx_parallel_for(p, 1000, 10, bounds_fn, &b);
    assert_int_equal(atomic_load(&a.count), atomic_load(&b.count));
    assert_true(atomic_load(&a.count) > 3); /* more chunks than threads when there is work */
    qsort(a.begins, (size_t)atomic_load(&a.count), sizeof(int64_t), cmp_i64);
    qsort(b.begins, (size_t)atomic_load(&b.count), sizeof(int64_t), cmp_i64);
    assert_memory_equal(a.begins, b.begins, sizeof(int64_t) * (size_t)atomic_load(&a.count));
    nx_pool_free(p);
}

/* Each thread runs its own contiguous run of chunks front to back; a thread that is done takes
 * the others' remaining chunks from the back.  Made deterministic: the owner (thread 0) blocks
 * in its first chunk until the worker has taken one of the owner's chunks, so the worker must
 * run its own run (chunks 16..31 of 32, ascending) and then the owner's from its back end
 * (chunk 15, 14, ...), while the owner runs 0, 1, 2, ... until the two meet. */
struct steal_ctx {
    pthread_t owner;
    int64_t n_per_chunk;
    atomic_bool stolen, timed_out;
    atomic_int n_owner, n_worker, bad_size;
    int64_t owner_seq[64], worker_seq[64];
};

static void steal_fn(void *c, int64_t begin, int64_t end) {
    struct steal_ctx *sc = c;
    const int64_t k = begin / sc->n_per_chunk;
    if (end - begin != sc->n_per_chunk) atomic_fetch_add(&sc->bad_size, 1); /* no assert off the main thread */
    if (pthread_equal(pthread_self(), sc->owner)) {
        int i = atomic_fetch_add(&sc->n_owner, 1);
        if (i < 64) sc->owner_seq[i] = k;
        if (i == 0) { /* hold the owner until the worker has stolen (at most 20 s) */
            double t0 = nx_time_s();
            while (!atomic_load(&sc->stolen))
                if (nx_time_s() - t0 > 20) {
                    atomic_store(&sc->timed_out, true);
                    break;
                }
        }
    } else {
        int i = atomic_fetch_add(&sc->n_worker, 1);
        if (i < 64) sc->worker_seq[i] = k;
        if (k < 16) atomic_store(&sc->stolen, true);
    }
}

static void test_parallel_for_own_runs_then_steals_from_the_back(void **state) {
    (void)state;
    nx_pool *p = nx_pool_create(2, NULL);
    assert_non_null(p);
    for (int rep = 0; rep < 20; rep++) {
        struct steal_ctx sc = {.owner = pthread_self(), .n_per_chunk = 10};
        nx_parallel_for(p, 320, 10, steal_fn, &sc); /* 2 threads x 16 chunks of 10 */
        assert_false(atomic_load(&sc.timed_out));
        assert_int_equal(atomic_load(&sc.bad_size), 0);
        const int no = atomic_load(&sc.n_owner), nw = atomic_load(&sc.n_worker);
        assert_int_equal(no + nw, 32);
        /* the owner: chunk 0, 1, 2, ... of its own run, in order */
        for (int i = 0; i < no; i++) assert_int_equal(sc.owner_seq[i], i);
        /* the worker: its own run 16..31 in order, then the owner's from chunk 15 down */
        assert_true(nw > 16);
        for (int i = 0; i < 16; i++) assert_int_equal(sc.worker_seq[i], 16 + i);
        for (int i = 16; i < nw; i++) assert_int_equal(sc.worker_seq[i], 15 - (i - 16));
    }
    nx_pool_free(p);
}

/* Each run records which thread ran each index; reuse means the same threads every time. */
typedef struct reuse_ctx {
    atomic_llong sum;
    pthread_t tid[2];
    atomic_int moved; /* runs in which index 1 ran on another thread than in the first run */
    bool first;
} reuse_ctx;

static void reuse_task(void *c, int ith, int nth) {
    (void)nth;
    reuse_ctx *rc = c;
    atomic_fetch_add(&rc->sum, ith + 1);
    if (rc->first) rc->tid[ith] = pthread_self();
    else if (ith == 1 && !pthread_equal(rc->tid[1], pthread_self())) atomic_fetch_add(&rc->moved, 1);
}

/* Thousands of runs reuse the pool's threads: index 0 is the caller, index 1 the same worker
 * thread in every run (no thread is created per run), and every run completes.  The time per
 * run is printed for information only (it depends on the machine's load). */
static void test_pool_reuse(void **state) {
    (void)state;
    nx_pool *p = nx_pool_create(2, NULL);
    reuse_ctx rc = {.first = true};
    atomic_init(&rc.sum, 0);
    atomic_init(&rc.moved, 0);
    nx_pool_run(p, reuse_task, &rc);
    assert_true(pthread_equal(rc.tid[0], pthread_self()));
    assert_false(pthread_equal(rc.tid[1], pthread_self()));
    rc.first = false;
    const int reps = 20000;
    double t0 = nx_time_s();
    for (int i = 0; i < reps; i++) nx_pool_run(p, reuse_task, &rc);
    double dt = nx_time_s() - t0;
    assert_int_equal(atomic_load(&rc.sum), (long long)(reps + 1) * 3);
    assert_int_equal(atomic_load(&rc.moved), 0);
    print_message("20000 runs of a 2-thread pool: %.1f us/run\n", dt / reps * 1e6);
    nx_pool_free(p);
}

static void test_default_threads_env(void **state) {
    (void)state;
    setenv("NEXTN_THREADS", "3", 1);
    assert_int_equal(nx_default_threads(), 3);
    nx_pool *p = nx_pool_create(0, NULL);
    assert_int_equal(nx_pool_size(p), 3);
    nx_pool_free(p);
    unsetenv("NEXTN_THREADS");
    int cpus = nx_default_threads();
    assert_true(cpus >= 1);
    setenv("NEXTN_THREADS", "zero", 1);
    assert_int_equal(nx_default_threads(), cpus);
    setenv("NEXTN_THREADS", "0", 1);
    assert_int_equal(nx_default_threads(), cpus);
    setenv("NEXTN_THREADS", "4x", 1);
    assert_int_equal(nx_default_threads(), cpus);
    unsetenv("NEXTN_THREADS");
    nx_err e;
    assert_null(nx_pool_create(100000, &e));
    assert_non_null(strstr(e.msg, "100000"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_run_calls_every_thread_once),
        cmocka_unit_test(test_parallel_for_covers_each_index_once),
        cmocka_unit_test(test_parallel_for_chunks_are_deterministic),
        cmocka_unit_test(test_parallel_for_own_runs_then_steals_from_the_back),
        cmocka_unit_test(test_pool_reuse),
        cmocka_unit_test(test_default_threads_env),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
