/* bench_tree.c - how often would a second draft branch rescue a rejected first draft?
 * usage: bench_tree MODEL PROMPTS [n_prompts=16] [n_gen=128] [threads=1] [topk=3]
 * PROMPTS: one prompt per line, comma-separated token ids (tests/fixtures/demo-model/prompts.txt).
 *
 * Input to the tree-draft study in docs/mtp.md.  Per prompt: plain greedy decoding of n_gen
 * tokens (the target sequence S and the trunk's post-norm hidden rows h), then ONE batched pass
 * of the MTP head over the mirror rows (S[p], position p, h[p-1]) - exactly the rows the
 * speculative driver writes, so row p's logits are the driver's first draft for position p+1
 * whenever the step starts at p.  For every generated position it records the rank of the
 * target token S[p+1] among the head's logits (full vocabulary, ties to the lower id as the
 * driver's argmax), and prints:
 *   a1 = P(rank 0)              the first draft is accepted (a chain's first position),
 *   r2 = P(rank 1 | rank != 0)  a top-2 branch would rescue a rejected first draft,
 *   r3 = P(rank <= 2 | rank != 0) the same for a top-3 branch pair.
 * Counts only, no timing: the machine's load does not matter. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/common.h"
#include "base/threads.h"
#include "forward/forward.h"
#include "model/model.h"
#include "spec/mtp.h"

enum { LMAX = 2048 };

static int read_prompt(FILE *f, int32_t *ids, int max) {
    char line[16384];
    if (!fgets(line, sizeof line, f)) return -1;
    int n = 0;
    for (char *s = line; *s && n < max;) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s) break;
        ids[n++] = (int32_t)v;
        s = end;
        while (*s == ',' || *s == ' ') s++;
        if (*s == '\n') break;
    }
    return n;
}

static int32_t rank_of(const float *lg, int32_t V, int32_t target) {
    const float t = lg[target];
    int32_t r = 0;
    for (int32_t i = 0; i < V; i++) r += lg[i] > t || (lg[i] == t && i < target);
    return r;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL PROMPTS [n_prompts=16] [n_gen=128] [threads=1] [topk=3]\n", argv[0]);
        return 2;
    }
    const int np = argc > 3 ? atoi(argv[3]) : 16, ng = argc > 4 ? atoi(argv[4]) : 128;
    const int nth = argc > 5 ? atoi(argv[5]) : 1;
    if (np < 1 || ng < 1 || ng > LMAX / 2 || nth < 1) {
        fprintf(stderr, "bench_tree: n_prompts >= 1, n_gen 1..%d, threads >= 1\n", LMAX / 2);
        return 2;
    }
    FILE *pf = fopen(argv[2], "r");
    if (!pf) {
        perror(argv[2]);
        return 1;
    }
    nx_err err = {0};
    nx_model *m = NULL;
    nx_pool *pool = NULL;
    nx_mtp_head *head = NULL;
    char notice[512] = "";
    if (!nx_model_load(&m, argv[1], true, &err) || !(pool = nx_pool_create(nth, &err)) ||
        !nx_mtp_head_open(&head, m, argv[1], NULL, notice, sizeof notice, &err)) {
        fprintf(stderr, "bench_tree: %s\n", err.msg);
        return 1;
    }
    if (!head) {
        fprintf(stderr, "bench_tree: no MTP head: %s\n", notice);
        return 1;
    }
    const int32_t V = (int32_t)m->hp.n_vocab, E = (int32_t)m->hp.n_embd;
    static int32_t S[LMAX], pos[LMAX];
    static int8_t lg[LMAX];
    float *H = malloc((size_t)LMAX * (size_t)E * sizeof(float));
    float *hin = malloc((size_t)LMAX * (size_t)E * sizeof(float));
    long n = 0, hit[4] = {0};
    bool ok = H && hin;
    for (int pi = 0; ok && pi < np; pi++) {
        const int L0 = read_prompt(pf, S, LMAX / 2);
        if (L0 <= 0) break;
        const int L = L0 + ng;
        nx_ctx_params cp = nx_ctx_default_params();
        cp.n_ctx = L + 1;
        nx_ctx *c = NULL;
        nx_mtp *mt = NULL;
        ok = nx_ctx_create(&c, m, &cp, pool, &err) &&
             nx_mtp_create(&mt, head, L + 1, 1, cp.kv_type, cp.kv_type_v, pool, &err);
        /* plain greedy decoding: the prompt in one batch, then one row per token */
        for (int i = 0; i < L0; i++) pos[i] = i, lg[i] = (int8_t)(i == L0 - 1);
        nx_batch b = {L0, S, pos, NULL, lg};
        ok = ok && nx_forward(c, &b, &err);
        if (ok) memcpy(H, nx_ctx_hidden(c), (size_t)L0 * (size_t)E * sizeof(float));
        for (int p = L0; ok && p < L; p++) {
            const float *lo = nx_ctx_logits(c, p == L0 ? L0 - 1 : 0);
            int32_t best = 0;
            for (int32_t i = 1; i < V; i++) best = lo[i] > lo[best] ? i : best;
            S[p] = best;
            if (p == L - 1) break;
            int32_t tp = p;
            int8_t one = 1;
            nx_batch b1 = {1, &S[p], &tp, NULL, &one};
            ok = nx_forward(c, &b1, &err);
            if (ok) memcpy(H + (size_t)p * E, nx_ctx_hidden(c), (size_t)E * sizeof(float));
        }
        /* the mirror rows (S[p], p, h[p-1]); h[-1] = 0 as at the driver's start */
        for (int p = 0; ok && p < L - 1; p++) {
            pos[p] = p;
            lg[p] = (int8_t)(p >= L0 - 1);
            if (p == 0) memset(hin, 0, (size_t)E * sizeof(float));
            else memcpy(hin + (size_t)p * E, H + (size_t)(p - 1) * E, (size_t)E * sizeof(float));
        }
        ok = ok && nx_mtp_forward(mt, L - 1, S, pos, NULL, hin, lg, &err);
        for (int p = L0 - 1; ok && p < L - 1; p++) {
            const int32_t r = rank_of(nx_mtp_logits(mt, p), nx_mtp_n_logits(mt), S[p + 1]);
            n++;
            if (r < 3) hit[r]++;
        }
        nx_mtp_free(mt);
        nx_ctx_free(c);
    }
    fclose(pf);
    if (!ok) {
        fprintf(stderr, "bench_tree: %s\n", err.msg);
        return 1;
    }
    if (!n) {
        fprintf(stderr, "bench_tree: no prompts read from %s\n", argv[2]);
        return 1;
    }
    const long miss = n - hit[0];
    printf("%s: %ld draft positions, a1 = %.4f (%ld), r2 = %.4f (%ld/%ld), r3 = %.4f (%ld/%ld)\n", argv[1], n,
           (double)hit[0] / (double)n, hit[0], miss ? (double)hit[1] / (double)miss : 0.0, hit[1], miss,
           miss ? (double)(hit[1] + hit[2]) / (double)miss : 0.0, hit[1] + hit[2], miss);
    nx_mtp_head_free(head);
    nx_pool_free(pool);
    nx_model_free(m);
    free(H);
    free(hin);
    return 0;
}
