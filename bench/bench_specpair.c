/* bench_specpair.c - where `--spec mtp` loses against plain decoding, step by step: a plain
 * driver and a speculative one decode the same prompt side by side, their steps alternated
 * (one of each, the order swapped every step), so a change of the machine's load hits both.
 *
 * usage: bench_specpair MODEL [n_gen=128] [runs=9] [threads=1] [draft_max=3] [prompt_len=32] [mode=spec]
 *
 * mode spec: the second driver is `--spec mtp` at default settings (adaptive, the draft
 * vocabulary the CLI would use); mode aa: it is a second plain driver (a control: the harness's
 * own asymmetry, expected 1.000 within noise); mode snap: a second plain driver whose context
 * has the draft_max recurrent snapshot slots of a speculative one.  Each run uses a new random prompt (seeded by the
 * run number, ids below V - 3 as spec-bench makes them) and new contexts.  Step i of the second
 * driver is paired with step i of the plain one; its time over the plain step's is booked as
 * the cost of a drafted step (it verified drafts) or of a plain step of the speculative driver
 * (bookkeeping, backlog copies, the rollback replay a rejected draft leaves to the next step).
 * Times are process CPU seconds (CLOCK_PROCESS_CPUTIME_ID) and wall seconds.  Printed per run:
 * the speed ratio (second / plain, tokens per second) on both clocks, the drafted steps and the
 * two extra-time shares as % of the plain run's time; then the median and min-max of the ratios
 * over runs, the pooled shares and the mean extra time of one plain step with its standard error.
 * On a shared VM single steps can take several times their usual CPU time (the vCPU is
 * descheduled without the guest seeing it), so a robust figure is printed too: the medians of
 * the per-step differences of each kind times their counts, over the plain steps' median.
 * SPECPAIR_TRACE=1 prints every step pair to stderr (run, step, ms of each side, drafted). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "base/common.h"
#include "base/threads.h"
#include "forward/forward.h"
#include "model/model.h"
#include "spec/draft_vocab.h"
#include "spec/mtp.h"
#include "spec/spec.h"
#include "tokenizer/tokenizer.h"

enum { MAXR = 64, MAXG = 4096 };

typedef struct side {
    nx_ctx *c;
    nx_mtp *m;
    nx_spec *s;
    int32_t got;        /* tokens emitted (the prefill's first included) */
    int32_t *out;       /* [n_gen + 32] */
} side;

static bool open_side(side *d, nx_model *model, const nx_mtp_head *head, bool snapshots, int32_t n_ctx, int32_t dmax,
                      nx_pool *pool, const int32_t *prompt, int32_t n_prompt, int32_t n_gen, nx_err *err) {
    memset(d, 0, sizeof *d);
    nx_ctx_params cp = nx_ctx_default_params();
    cp.n_ctx = n_ctx;
    cp.n_snapshots = head || snapshots ? dmax : 0;
    nx_spec_params sp = nx_spec_default_params();
    sp.draft_max = dmax;
    d->out = calloc((size_t)n_gen + 32, sizeof *d->out);
    int32_t first;
    if (!d->out || !nx_ctx_create(&d->c, model, &cp, pool, err) ||
        (head && !nx_mtp_create(&d->m, head, n_ctx, 1, NX_KV_F16, NX_KV_F16, pool, err)) ||
        !nx_spec_create(&d->s, d->c, d->m, &sp, err) || !nx_spec_prefill(d->s, 1, &prompt, &n_prompt, &first, err))
        return false;
    nx_spec_reset_stats(d->s);
    d->out[0] = first;
    d->got = 1;
    return true;
}

static void close_side(side *d) {
    nx_spec_free(d->s);
    nx_mtp_free(d->m);
    nx_ctx_free(d->c);
    free(d->out);
}

/* One step of d (if it still has tokens to emit); *cpu / *wall receive its times. */
static bool step(side *d, int32_t n_gen, double *cpu, double *wall, nx_err *err) {
    int32_t out[17], n_out, max_out = n_gen - d->got;
    const double c0 = bu_seconds(CLOCK_PROCESS_CPUTIME_ID), w0 = bu_seconds(CLOCK_MONOTONIC);
    if (!nx_spec_step(d->s, &max_out, out, &n_out, err)) return false;
    *wall = bu_seconds(CLOCK_MONOTONIC) - w0;
    *cpu = bu_seconds(CLOCK_PROCESS_CPUTIME_ID) - c0;
    for (int32_t j = 0; j < n_out; j++) d->out[d->got++] = out[j];
    return true;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr,
                "usage: %s MODEL [n_gen=128] [runs=9] [threads=1] [draft_max=3] [prompt_len=32] [mode=spec|aa|snap]\n",
                argv[0]);
        return 2;
    }
    const int32_t ng = argc > 2 ? atoi(argv[2]) : 128, runs = argc > 3 ? atoi(argv[3]) : 9;
    const int threads = argc > 4 ? atoi(argv[4]) : 1;
    const int32_t dmax = argc > 5 ? atoi(argv[5]) : 3, np = argc > 6 ? atoi(argv[6]) : 32;
    const char *mode = argc > 7 ? argv[7] : "spec";
    const bool snap = !strcmp(mode, "snap"), aa = !strcmp(mode, "aa") || snap;
    if (ng < 2 || ng > MAXG || runs < 1 || runs > MAXR || threads < 1 || dmax < 1 || dmax > 16 || np < 1 || np > 4096 ||
        (!aa && strcmp(mode, "spec"))) {
        fprintf(stderr, "bench_specpair: bad arguments\n");
        return 2;
    }
    nx_err err = {0};
    nx_model *model = NULL;
    nx_mtp_head *head = NULL;
    nx_pool *pool = NULL;
    char notice[256], dvf[1024] = "";
    int32_t K = 0;
    if (!nx_model_load(&model, argv[1], true, &err) ||
        !nx_mtp_head_open(&head, model, argv[1], NULL, notice, sizeof notice, &err) ||
        !(pool = nx_pool_create(threads, &err)) ||
        !nx_draft_vocab_auto(argv[1], model->hp.n_vocab, dvf, sizeof dvf, &K, &err)) {
        fprintf(stderr, "bench_specpair: %s\n", err.msg);
        return 1;
    }
    if (!head) {
        fprintf(stderr, "bench_specpair: %s\n", notice);
        return 1;
    }
    /* the draft vocabulary spec-bench would use by default */
    const bool from_file = K > 0;
    if (K == 0) K = nx_draft_vocab_default_k(model->hp.n_vocab);
    if (K > 0) {
        uint64_t fp = 0;
        nx_tokenizer *tk;
        if (nx_gguf_find_kv(model->gguf, "tokenizer.ggml.model") && nx_tokenizer_from_gguf(&tk, model->gguf, &err)) {
            fp = nx_draft_vocab_fingerprint(tk);
            nx_tokenizer_free(tk);
        }
        int32_t *ids = malloc((size_t)K * sizeof *ids);
        if (!ids || !nx_draft_vocab_select(from_file ? dvf : NULL, model->hp.n_vocab, fp, K, ids, &err) ||
            !nx_mtp_head_set_draft_vocab(head, ids, K, &err)) {
            fprintf(stderr, "bench_specpair: %s\n", err.msg);
            return 1;
        }
        free(ids);
    }
    const int32_t V = (int32_t)model->hp.n_vocab, n_ctx = np + ng + dmax + 2;
    enum { NS = 2 }; /* side 0: plain */
    printf("model %s: vocab %d, draft vocabulary %d; %d runs x %d tokens, prompt %d, %d thread(s), draft-max %d, %s\n",
           argv[1], V, K, runs, ng, np, threads, dmax,
           snap ? "plain vs plain with draft-max snapshot slots"
           : aa ? "A/A control (plain vs plain)"
                : "plain vs --spec mtp");
    static double ratio_cpu[NS][MAXR], ratio_wall[NS][MAXR];
    double sum_c[NS] = {0}, sum_dx[NS] = {0}, sum_px[NS] = {0}, px_sq[NS] = {0};
    /* per-step differences (second side - plain), relative to the plain step: drafted steps,
     * the plain steps of the speculative side; and the plain side's step times */
    double *d_dx[NS], *d_px[NS], *t_p = malloc((size_t)runs * (size_t)ng * sizeof *t_p);
    int64_t n_tp = 0;
    for (int k = 0; k < NS; k++) {
        d_dx[k] = malloc((size_t)runs * (size_t)ng * sizeof **d_dx);
        d_px[k] = malloc((size_t)runs * (size_t)ng * sizeof **d_px);
        if (!d_dx[k] || !d_px[k] || !t_p) return 1;
    }
    int64_t n_px[NS] = {0}, n_dx[NS] = {0};
    int32_t *prompt = malloc((size_t)np * sizeof *prompt);
    if (!prompt) return 1;
    for (int r = 0; r < runs; r++) {
        uint64_t x = (uint64_t)(r + 1) * 0x9e3779b97f4a7c15ULL + 1;
        for (int32_t i = 0; i < np; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            prompt[i] = (int32_t)(x % (uint64_t)(V - 3));
        }
        side sd[NS];
        for (int k = 0; k < NS; k++)
            if (!open_side(&sd[k], model, k == 0 || aa ? NULL : head, k > 0 && snap, n_ctx, dmax, pool, prompt, np, ng,
                           &err)) {
                fprintf(stderr, "bench_specpair: %s\n", err.msg);
                return 1;
            }
        double c[NS] = {0}, w[NS] = {0}, dx[NS] = {0}, px[NS] = {0};
        int32_t drafted_steps[NS] = {0};
        for (int32_t i = 0;; i++) {
            bool any = false, on[NS];
            double cs[NS] = {0}, ws[NS] = {0};
            int64_t sp0[NS];
            for (int k = 0; k < NS; k++) {
                on[k] = sd[k].got < ng;
                any = any || on[k];
                sp0[k] = nx_spec_get_stats(sd[k].s)->spec_steps;
            }
            if (!any) break;
            for (int o = 0; o < NS; o++) {
                const int k = (i + o) % NS; /* rotating order */
                if (on[k] && !step(&sd[k], ng, &cs[k], &ws[k], &err)) {
                    fprintf(stderr, "bench_specpair: %s\n", err.msg);
                    return 1;
                }
                c[k] += cs[k];
                w[k] += ws[k];
            }
            if (on[0]) t_p[n_tp++] = cs[0];
            if (getenv("SPECPAIR_TRACE")) /* run, step, ms of each side, drafted */
                fprintf(stderr, "T %d %d %.3f %.3f %lld\n", r, i, 1e3 * cs[0], 1e3 * cs[1],
                        (long long)(nx_spec_get_stats(sd[1].s)->spec_steps - sp0[1]));
            for (int k = 1; k < NS; k++) {
                if (!on[0] || !on[k]) continue; /* unpaired tail (a side emitted more per step) */
                const double d = cs[k] - cs[0];
                if (nx_spec_get_stats(sd[k].s)->spec_steps > sp0[k]) {
                    drafted_steps[k]++;
                    dx[k] += d;
                    d_dx[k][n_dx[k]++] = d;
                } else {
                    px[k] += d;
                    px_sq[k] += d * d;
                    d_px[k][n_px[k]++] = d;
                }
            }
        }
        printf("run %d:", r + 1);
        sum_c[0] += c[0];
        for (int k = 1; k < NS; k++) {
            for (int32_t i = 0; i < ng; i++)
                if (sd[0].out[i] != sd[k].out[i]) {
                    fprintf(stderr, "bench_specpair: run %d side %d token %d: %d, plain %d\n", r + 1, k, i,
                            sd[k].out[i], sd[0].out[i]);
                    return 1;
                }
            const nx_spec_stats *st = nx_spec_get_stats(sd[k].s);
            ratio_cpu[k][r] = c[0] / c[k]; /* both emitted ng - 1 tokens in the timed steps */
            ratio_wall[k][r] = w[0] / w[k];
            sum_c[k] += c[k], sum_dx[k] += dx[k], sum_px[k] += px[k];
            printf(" [%s] cpu %.4fx wall %.4fx, %d drafted, MTP rows %lld, verify rows %lld, extra drafted %+.2f%% plain "
                   "%+.2f%%", aa ? "plain 2" : "spec", ratio_cpu[k][r], ratio_wall[k][r], drafted_steps[k],
                   (long long)st->mtp_rows, (long long)st->verify_rows, 100 * dx[k] / c[0], 100 * px[k] / c[0]);
        }
        printf(" | %.2f ms per plain step\n", 1e3 * c[0] / (ng - 1));
        for (int k = 0; k < NS; k++) close_side(&sd[k]);
    }
    const double step_p = sum_c[0] / (double)(runs * (ng - 1)), med_p = bu_median(t_p, (int)n_tp);
    for (int k = 1; k < NS; k++) {
        const double mean_px = n_px[k] ? sum_px[k] / (double)n_px[k] : 0;
        const double se_px =
            n_px[k] > 1 ? sqrt((px_sq[k] / (double)n_px[k] - mean_px * mean_px) / (double)(n_px[k] - 1)) : 0;
        const double med_c = bu_median(ratio_cpu[k], runs), med_w = bu_median(ratio_wall[k], runs);
        /* robust to the VM's outlier steps: the median extra time of each kind of step, times
         * how many there were, over the plain run's median step times */
        const double mdx = n_dx[k] ? bu_median(d_dx[k], (int)n_dx[k]) : 0;
        const double mpx = n_px[k] ? bu_median(d_px[k], (int)n_px[k]) : 0;
        const double robust = 1.0 / (1.0 + ((double)n_dx[k] * mdx + (double)n_px[k] * mpx) / ((double)n_tp * med_p));
        printf("%s, median of %d: cpu %.4fx (%.4f-%.4f), wall %.4fx (%.4f-%.4f) | pooled cpu %.4fx | extra, pooled: "
               "drafted steps %+.3f%% (%lld steps), plain steps %+.3f%% (%lld steps; per step %+.1f +- %.1f us = "
               "%+.3f +- %.3f%% of a plain step)\n",
               aa ? "plain 2" : "spec", runs, med_c, ratio_cpu[k][0], ratio_cpu[k][runs - 1],
               med_w, ratio_wall[k][0], ratio_wall[k][runs - 1], sum_c[0] / sum_c[k], 100 * sum_dx[k] / sum_c[0],
               (long long)n_dx[k], 100 * sum_px[k] / sum_c[0], (long long)n_px[k], 1e6 * mean_px, 1e6 * se_px,
               100 * mean_px / step_p, 100 * se_px / step_p);
        printf("  robust (medians of the per-step differences): drafted step %+.1f%% of a plain step (%.2f ms), plain step "
               "%+.2f%% (%.1f us); plain step median %.2f ms => ratio %.4fx\n",
               100 * mdx / med_p, 1e3 * mdx, 100 * mpx / med_p, 1e6 * mpx, 1e3 * med_p, robust);
    }
    for (int k = 0; k < NS; k++) {
        free(d_dx[k]);
        free(d_px[k]);
    }
    free(t_p);
    free(prompt);
    nx_mtp_head_free(head);
    nx_pool_free(pool);
    nx_model_free(model);
    return 0;
}
