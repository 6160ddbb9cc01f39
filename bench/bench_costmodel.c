/* bench_costmodel.c - the adaptive draft length against fixed draft lengths on a cost table:
 * deterministic (no clock), so a loaded machine does not matter.
 *
 * usage: bench_costmodel MODEL PROMPTS [n_prompts=16] [n_gen=128] [draft_max=3] [verify=1,1.18,1.55,1.59,1.9]
 *                        [pass=0.07] [row=0.004] [seqs=1] [jitter=0] [spike=0] [cold=0]
 *
 * PROMPTS: lines of comma-separated token ids (tests/fixtures/demo-model/prompts.txt).  Each
 * prompt is decoded greedily (n_gen tokens) with the speculative driver at draft lengths
 * 1..draft_max fixed, and adaptive (the default settings), with the draft vocabulary the CLI
 * would use.  The driver's pass costs come from the table (nx_spec_set_cost_fn) instead of the
 * clock, in units of a 1-row decode: a verify with k rows per sequence costs verify[k-1] (the
 * last entry + its last step beyond the list) times the number of sequences' share (rows /
 * (k * seqs) is ignored: one sequence is the usual case), an MTP pass `pass + row x (rows - 1)`.
 * Printed: per configuration the simulated speedup over plain decoding (one unit per token),
 * the median over prompts and the total, acceptance and tokens per step, and the adaptive
 * result as a share of the best fixed length.  With seqs > 1 the prompts go in groups of
 * seqs sequences decoded together.  cold: the first pass of each kind and row count costs
 * (1 + cold) times its value (a fresh context's first-touch pages and cold caches; on the demo
 * model the first 2- and 4-row verifies took 1.3-1.4x, the first MTP pass 1.5-4x the later ones). */
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

enum { MAXP = 512, MAXLEN = 256, MAXV = 32, MAXS = 16 };

typedef struct costs {
    double ver[MAXV];
    int n_ver;
    double pass, row;
    double spike;    /* probability that a pass is preempted: it then costs 1 + 10 u units more */
    double jitter;   /* every pass costs (1 + jitter u) times its table value */
    double cold;     /* the first pass of each kind and row count costs (1 + cold) times more */
    uint8_t seen[2][64];
    uint64_t rng;
    double time;
} costs;

static double uniform(uint64_t *x) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return (double)(*x >> 11) * 0x1.0p-53;
}

static double cost_fn(void *user, nx_spec_cost_kind kind, int32_t rows, int32_t rows_per_seq) {
    costs *c = user;
    double t;
    if (kind == NX_SPEC_COST_VERIFY) {
        int k = rows_per_seq;
        if (k <= c->n_ver) t = c->ver[k - 1];
        else {
            double step = c->n_ver > 1 ? c->ver[c->n_ver - 1] - c->ver[c->n_ver - 2] : 0.1;
            t = c->ver[c->n_ver - 1] + step * (k - c->n_ver);
        }
    } else {
        t = c->pass + c->row * (rows - 1);
    }
    uint8_t *seen = &c->seen[kind == NX_SPEC_COST_VERIFY][rows < 63 ? rows : 63];
    if (!*seen) {
        *seen = 1;
        t *= 1.0 + c->cold;
    }
    if (c->jitter > 0) t *= 1.0 + c->jitter * uniform(&c->rng);
    if (c->spike > 0 && uniform(&c->rng) < c->spike) t += 1.0 + 10.0 * uniform(&c->rng);
    c->time += t;
    return t;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL PROMPTS [n_prompts=16] [n_gen=128] [draft_max=3] [verify=1,1.18,1.55,1.59,1.9] "
                        "[pass=0.07] [row=0.004] [seqs=1] [jitter=0] [spike=0] [cold=0]\n", argv[0]);
        return 2;
    }
    const int np = argc > 3 ? atoi(argv[3]) : 16, ng = argc > 4 ? atoi(argv[4]) : 128;
    const int dmax = argc > 5 ? atoi(argv[5]) : 3;
    costs c0 = {.pass = argc > 7 ? atof(argv[7]) : 0.07, .row = argc > 8 ? atof(argv[8]) : 0.004};
    const int S = argc > 9 ? atoi(argv[9]) : 1;
    c0.jitter = argc > 10 ? atof(argv[10]) : 0.0;
    c0.spike = argc > 11 ? atof(argv[11]) : 0.0;
    c0.cold = argc > 12 ? atof(argv[12]) : 0.0;
    {
        char buf[512];
        snprintf(buf, sizeof buf, "%s", argc > 6 ? argv[6] : "1,1.18,1.55,1.59,1.9");
        for (char *t = strtok(buf, ","); t && c0.n_ver < MAXV; t = strtok(NULL, ",")) c0.ver[c0.n_ver++] = atof(t);
    }
    if (np < 1 || np > MAXP || ng < 1 || dmax < 1 || dmax > 16 || S < 1 || S > MAXS || c0.n_ver < 1) {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }
    nx_err err = {0};
    nx_model *m = NULL;
    nx_mtp_head *head = NULL;
    nx_pool *pool = NULL;
    char notice[256], dvf[1024] = "";
    int32_t K = 0;
    if (!nx_model_load(&m, argv[1], true, &err) ||
        !nx_mtp_head_open(&head, m, argv[1], NULL, notice, sizeof notice, &err) || !(pool = nx_pool_create(1, &err)) ||
        !nx_draft_vocab_auto(argv[1], m->hp.n_vocab, dvf, sizeof dvf, &K, &err)) {
        fprintf(stderr, "bench_costmodel: %s\n", err.msg);
        return 1;
    }
    if (!head) {
        fprintf(stderr, "bench_costmodel: %s\n", notice);
        return 1;
    }
    const bool from_file = K > 0;
    if (K == 0) K = nx_draft_vocab_default_k(m->hp.n_vocab);
    if (K > 0) {
        uint64_t fp = 0;
        nx_tokenizer *tk;
        if (nx_tokenizer_from_gguf(&tk, m->gguf, &err)) {
            fp = nx_draft_vocab_fingerprint(tk);
            nx_tokenizer_free(tk);
        }
        int32_t *ids = malloc((size_t)K * sizeof *ids);
        if (!ids || !nx_draft_vocab_select(from_file ? dvf : NULL, m->hp.n_vocab, fp, K, ids, &err) ||
            !nx_mtp_head_set_draft_vocab(head, ids, K, &err)) {
            fprintf(stderr, "bench_costmodel: %s\n", err.msg);
            return 1;
        }
        free(ids);
    }
    static int32_t prompt[MAXP][MAXLEN];
    static int32_t n_prompt[MAXP];
    int n = 0;
    FILE *fp = fopen(argv[2], "r");
    if (!fp) {
        fprintf(stderr, "bench_costmodel: %s: cannot open\n", argv[2]);
        return 1;
    }
    static char line[1 << 16];
    while (n < np && fgets(line, sizeof line, fp)) {
        int k = 0;
        for (char *t = strtok(line, ",\n"); t && k < MAXLEN; t = strtok(NULL, ",\n")) prompt[n][k++] = atoi(t);
        if (k > 0) n_prompt[n++] = k;
    }
    fclose(fp);
    const int n_groups = n / S;
    printf("model %s, %d prompts x %d tokens, %d sequence(s) per batch, draft vocabulary %d, verify costs", argv[1],
           n_groups * S, ng, S, K);
    for (int i = 0; i < c0.n_ver; i++) printf(" %g", c0.ver[i]);
    printf(", draft pass %g + %g per extra row\n", c0.pass, c0.row);
    double best_total = 0, best_med = 0, res_total[18], res_med[18];
    for (int cfg = 1; cfg <= dmax + 1; cfg++) { /* cfg dmax + 1 = adaptive */
        const bool adaptive = cfg == dmax + 1;
        const int N = adaptive ? dmax : cfg;
        double sp[MAXP], tot_time = 0, tot_tok = 0;
        int64_t drafted = 0, accepted = 0, steps = 0, emitted = 0;
        for (int g = 0; g < n_groups; g++) {
            nx_ctx_params cp = nx_ctx_default_params();
            int32_t maxlen = 0;
            for (int i = 0; i < S; i++) maxlen = NX_MAX(maxlen, n_prompt[g * S + i]);
            cp.n_ctx = maxlen + ng + N + 2;
            cp.n_seq = S;
            cp.n_snapshots = N;
            nx_ctx *c = NULL;
            nx_mtp *mt = NULL;
            nx_spec *s = NULL;
            nx_spec_params sp_ = nx_spec_default_params();
            sp_.draft_max = N;
            sp_.adaptive = adaptive;
            costs cc = c0;
            cc.time = 0;
            cc.rng = 0x9e3779b97f4a7c15ULL * (uint64_t)(g + 1) + (uint64_t)cfg;
            const int32_t *pr[MAXS];
            int32_t npr[MAXS], first[MAXS], got[MAXS], out[MAXS * 17], n_out[MAXS], max_out[MAXS];
            for (int i = 0; i < S; i++) {
                pr[i] = prompt[g * S + i];
                npr[i] = n_prompt[g * S + i];
            }
            if (!nx_ctx_create(&c, m, &cp, pool, &err) ||
                !nx_mtp_create(&mt, head, cp.n_ctx, S, NX_KV_F16, NX_KV_F16, pool, &err) ||
                !nx_spec_create(&s, c, mt, &sp_, &err) || (nx_spec_set_cost_fn(s, cost_fn, &cc), false) ||
                !nx_spec_prefill(s, S, pr, npr, first, &err)) {
                if (err.msg[0]) {
                    fprintf(stderr, "bench_costmodel: %s\n", err.msg);
                    return 1;
                }
            }
            nx_spec_reset_stats(s);
            cc.time = 0;
            for (int i = 0; i < S; i++) got[i] = 1;
            for (;;) {
                bool any = false;
                for (int i = 0; i < S; i++) {
                    max_out[i] = ng - got[i];
                    if (max_out[i] <= 0) nx_spec_set_active(s, i, false);
                    any = any || max_out[i] > 0;
                }
                if (!any) break;
                if (!nx_spec_step(s, max_out, out, n_out, &err)) {
                    fprintf(stderr, "bench_costmodel: %s\n", err.msg);
                    return 1;
                }
                for (int i = 0; i < S; i++) got[i] += n_out[i];
            }
            const nx_spec_stats *st = nx_spec_get_stats(s);
            /* plain decoding of the same tokens: one 1-row (S-row) step per token, with the
             * expected noise */
            const double plain = (double)st->emitted / S * (c0.ver[0] * (1.0 + 0.5 * c0.jitter) + 6.0 * c0.spike);
            sp[g] = plain / cc.time;
            if (getenv("BCM_VERBOSE"))
                fprintf(stderr, "cfg %d group %d: %.3fx, %lld steps, %lld/%lld accepted\n", cfg, g, sp[g],
                        (long long)st->steps, (long long)st->accepted, (long long)st->drafted);
            tot_time += cc.time;
            tot_tok += plain;
            drafted += st->drafted;
            accepted += st->accepted;
            steps += st->steps;
            emitted += st->emitted;
            nx_spec_free(s);
            nx_mtp_free(mt);
            nx_ctx_free(c);
        }
        qsort(sp, (size_t)n_groups, sizeof *sp, cmp_d);
        const double med = n_groups % 2 ? sp[n_groups / 2] : 0.5 * (sp[n_groups / 2 - 1] + sp[n_groups / 2]);
        res_total[cfg] = tot_tok / tot_time;
        res_med[cfg] = med;
        if (!adaptive) {
            best_total = res_total[cfg] > best_total ? res_total[cfg] : best_total;
            best_med = med > best_med ? med : best_med;
        }
        printf("%-10s draft-max %d: speedup median %.3fx, total %.3fx | acceptance %.1f%% | %.2f tokens/step%s\n",
               adaptive ? "adaptive" : "fixed", N, med, res_total[cfg], drafted ? 100.0 * accepted / drafted : 0.0,
               steps ? (double)emitted / steps : 0.0, adaptive ? "" : "");
    }
    printf("adaptive / best fixed: median %.3f, total %.3f\n", res_med[dmax + 1] / best_med,
           res_total[dmax + 1] / best_total);
    nx_mtp_head_free(head);
    nx_pool_free(pool);
    nx_model_free(m);
    return 0;
}
