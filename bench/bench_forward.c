/* bench_forward.c - prefill and decode speed of the forward pass on a GGUF model.
 * usage: bench_forward MODEL [n_prompt=64] [n_gen=32] [threads=0] [reps=3]
 * Prints the median over reps of prefill tokens/s (one batch of n_prompt) and decode tokens/s
 * (n_gen single-token steps after the prompt), plus the weight bytes read per decode step, and
 * the same rates per CPU-second of the process (meaningful on a shared machine with 1 thread). */
#include <stdio.h>
#include <stdlib.h>

#include "bench_util.h"
#include "forward/forward.h"

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL [n_prompt] [n_gen] [threads] [reps]\n", argv[0]);
        return 2;
    }
    int np = argc > 2 ? atoi(argv[2]) : 64, ng = argc > 3 ? atoi(argv[3]) : 32;
    int nt = argc > 4 ? atoi(argv[4]) : 0, reps = argc > 5 ? atoi(argv[5]) : 3;
    if (np < 1 || ng < 1 || reps < 1 || reps > 100) return 2;
    nx_err err;
    nx_model *m;
    nx_pool *pool = nx_pool_create(nt, &err);
    if (!pool || !nx_model_load(&m, argv[1], false, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    nx_ctx_params p = nx_ctx_default_params();
    p.n_ctx = np + ng + 1;
    nx_ctx *c;
    if (!nx_ctx_create(&c, m, &p, pool, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    int32_t *tok = malloc((size_t)np * sizeof *tok), *pos = malloc((size_t)np * sizeof *pos);
    for (int i = 0; i < np; i++) { tok[i] = (int32_t)((i * 7919) % m->hp.n_vocab); pos[i] = i; }
    double pp[100], tg[100], ppc[100], tgc[100];
    for (int r = 0; r < reps; r++) {
        nx_ctx_seq_clear(c, 0, NULL);
        nx_batch b = {np, tok, pos, NULL, NULL};
        double c0 = bu_seconds(CLOCK_PROCESS_CPUTIME_ID), t0 = nx_time_s();
        if (!nx_forward(c, &b, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
        double t1 = nx_time_s(), c1 = bu_seconds(CLOCK_PROCESS_CPUTIME_ID);
        for (int i = 0; i < ng; i++) {
            int32_t t = (int32_t)((i * 31) % m->hp.n_vocab), ps = np + i;
            nx_batch d = {1, &t, &ps, NULL, NULL};
            if (!nx_forward(c, &d, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
        }
        double t2 = nx_time_s(), c2 = bu_seconds(CLOCK_PROCESS_CPUTIME_ID);
        pp[r] = np / (t1 - t0);
        tg[r] = ng / (t2 - t1);
        ppc[r] = np / (c1 - c0);
        tgc[r] = ng / (c2 - c1);
    }
    printf("model %s threads %d: pp%d %.2f t/s  tg%d %.2f t/s  (median of %d; weights %.1f MiB)\n", argv[1],
           nx_pool_size(pool), np, bu_median(pp, reps), ng, bu_median(tg, reps), reps, m->weight_bytes / 1048576.0);
    printf("  per CPU-second (all threads): pp%d %.2f t/cpu-s  tg%d %.2f t/cpu-s\n", np, bu_median(ppc, reps), ng,
           bu_median(tgc, reps));
    nx_ctx_free(c);
    nx_model_free(m);
    nx_pool_free(pool);
    free(tok);
    free(pos);
    return 0;
}
