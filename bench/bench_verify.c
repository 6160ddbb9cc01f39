/* bench_verify.c - cost of a k-row verify batch against a 1-row decode, in the speculative
 * loop's steady state.
 * usage: bench_verify MODEL [threads=1] [reps=20] [kmax=4] [cpu=1] [only=0]
 * After a 32-token prompt, each round runs a k-row batch for k = 1 .. kmax in turn (k rows at the
 * next positions, logits for every row), then rolls the last k - 1 rows back through the
 * snapshot slots (O(1), as the driver does after a verify that accepts nothing) so every batch
 * starts one position later.  Interleaving the k values spreads a shared machine's disturbances
 * over all of them.  Prints per k the median and minimum time (process CPU seconds with cpu=1,
 * meaningful with 1 thread on a busy machine; wall seconds with cpu=0) and both as a ratio to k=1.
 * only=K > 0 runs K-row batches alone (for a profiler: `perf record bench_verify M 1 40 4 1 4`). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bench_util.h"
#include "base/common.h"
#include "forward/forward.h"
#include "model/model.h"
#include "base/threads.h"


int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL [threads=1] [reps=20] [kmax=4] [cpu=1] [only=0]\n", argv[0]);
        return 2;
    }
    const int nth = argc > 2 ? atoi(argv[2]) : 1, reps = argc > 3 ? atoi(argv[3]) : 20;
    const int kmax = argc > 4 ? atoi(argv[4]) : 4, cpu = argc > 5 ? atoi(argv[5]) : 1;
    const int only = argc > 6 ? atoi(argv[6]) : 0;
    enum { NP = 32, KLIM = 16, RLIM = 200 };
    const clockid_t clock = cpu ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC;
    if (reps < 1 || reps > RLIM || kmax < 1 || kmax > KLIM || only < 0 || only > kmax) {
        fprintf(stderr, "reps 1..%d, kmax 1..%d, only 0..kmax\n", RLIM, KLIM);
        return 2;
    }
    nx_err err = {0};
    nx_model *m = NULL;
    nx_pool *pool = NULL;
    nx_ctx *c = NULL;
    nx_ctx_params p = nx_ctx_default_params();
    p.n_ctx = NP + reps * kmax + KLIM + 1;
    p.n_snapshots = kmax - 1;
    if (!nx_model_load(&m, argv[1], false, &err) || !(pool = nx_pool_create(nth, &err)) ||
        !nx_ctx_create(&c, m, &p, pool, &err)) {
        fprintf(stderr, "bench_verify: %s\n", err.msg);
        return 1;
    }
    const int32_t V = (int32_t)m->hp.n_vocab;
    int32_t tok[KLIM + NP], pos[KLIM + NP];
    int8_t lg[KLIM + NP];
    for (int i = 0; i < NP; i++) {
        tok[i] = (i * 131 + 7) % V;
        pos[i] = i;
        lg[i] = 0;
    }
    nx_batch pb = {NP, tok, pos, NULL, lg};
    bool ok = nx_forward(c, &pb, &err);
    static double t[KLIM + 1][RLIM];
    int32_t n_past = NP;
    for (int r = 0; ok && r < reps; r++) {
        for (int k = 1; ok && k <= kmax; k++) {
            if (only && k != only) continue;
            for (int i = 0; i < k; i++) {
                tok[i] = (int32_t)((n_past * 31 + i * 17) % V);
                pos[i] = n_past + i;
                lg[i] = 1;
            }
            nx_batch b = {k, tok, pos, NULL, lg};
            const double t0 = bu_seconds(clock);
            ok = nx_forward(c, &b, &err);
            t[k][r] = bu_seconds(clock) - t0;
            ok = ok && nx_ctx_seq_rollback(c, 0, k - 1, &err);
            n_past++;
        }
    }
    if (!ok) {
        fprintf(stderr, "bench_verify: %s\n", err.msg);
        return 1;
    }
    double med1 = 0, min1 = 0;
    printf("%s, %d thread(s), %s time, %d rounds\n", argv[1], nth, cpu ? "process CPU" : "wall", reps);
    for (int k = 1; k <= kmax; k++) {
        if (only && k != only) continue;
        const double med = bu_median(t[k], reps), mn = t[k][0];
        if (k == 1 || k == only) med1 = med, min1 = mn;
        printf("  %2d rows: median %8.3f ms = %.3fx   min %8.3f ms = %.3fx\n", k, med * 1e3, med / med1, mn * 1e3,
               mn / min1);
    }
    nx_ctx_free(c);
    nx_pool_free(pool);
    nx_model_free(m);
    return 0;
}
