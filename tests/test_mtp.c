/* test_mtp.c - the MTP head (src/mtp.c) against a naive double-precision implementation written
 * here straight from llama.cpp's graph_mtp (not from our forward pass), batched and row by row, with two
 * interleaved sequences and KV truncation; loading from the model, from an mtp-only file, from
 * a sibling file; clear errors for mismatched / broken files. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "forward/forward.h"
#include "convert/mkmodel.h"
#include "spec/mtp.h"
#include "quant/quant.h"

typedef tu_tiny fixture;

static int setup(void **state) {
    fixture *f = tu_tiny_new("tiny", 11, true, 0);
    assert_true(f->model.mtp.present);
    *state = f;
    return 0;
}

/* ---- naive double-precision MTP (graph_mtp) --------------------------------------------------- */

typedef struct naive {
    const nx_hparams *hp;
    nx_mk_memory *mem;
    int L;
    int n;              /* cached positions */
    double *K, *V;      /* [n_ctx][Hkv*D] */
} naive;

static const float *W(naive *nv, const char *fmt) {
    char name[128];
    snprintf(name, sizeof name, fmt, nv->L);
    nx_tensor_info ti;
    if (!nx_mk_memory_lookup(nv->mem, name, &ti)) fail_msg("tensor %s missing", name);
    assert_int_equal(ti.type, NX_TYPE_F32);
    return ti.data;
}

static void rms(const double *x, const float *w, double *out, int n, double eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    double r = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++) out[i] = x[i] * r * w[i];
}

/* y[o] = sum_i W[o][i] x[i], W row-major {in, out} */
static void mv(const float *w, const double *x, double *y, int in, int out) {
    for (int o = 0; o < out; o++) {
        double acc = 0;
        for (int i = 0; i < in; i++) acc += (double)w[(size_t)o * in + i] * x[i];
        y[o] = acc;
    }
}

static double sigm(double x) { return 1.0 / (1.0 + exp(-x)); }

/* One row at position nv->n; writes logits [V] and hout [E]. */
static void naive_row(naive *nv, int token, const float *hprev, double *logits, double *hout) {
    const nx_hparams *hp = nv->hp;
    const int E = (int)hp->n_embd, H = (int)hp->n_head, Hkv = (int)hp->n_head_kv, D = (int)hp->head_dim;
    const int R = (int)hp->n_rot, F = (int)hp->n_ff, V = (int)hp->n_vocab, KV = Hkv * D;
    const double eps = hp->eps;
    double *e = calloc((size_t)E, sizeof *e), *c = calloc(2 * (size_t)E, sizeof *c), *x = calloc((size_t)E, sizeof *x);
    double *a = calloc((size_t)E, sizeof *a), *qg = calloc(2 * (size_t)H * D, sizeof *qg);
    double *k = calloc((size_t)KV, sizeof *k), *v = calloc((size_t)KV, sizeof *v);
    double *att = calloc((size_t)H * D, sizeof *att), *o = calloc((size_t)E, sizeof *o);
    double *g = calloc((size_t)F, sizeof *g), *u = calloc((size_t)F, sizeof *u), *hb = calloc((size_t)E, sizeof *hb);
    double *sc = calloc((size_t)nv->n + 1, sizeof *sc);
    /* 1-4: embedding (token_embd: no dedicated MTP embedding in this model), norms, concat, eh_proj */
    nx_tensor_info ti;
    assert_true(nx_mk_memory_lookup(nv->mem, "token_embd.weight", &ti));
    const float *emb = (const float *)ti.data + (size_t)token * E;
    for (int i = 0; i < E; i++) e[i] = emb[i];
    rms(e, W(nv, "blk.%d.nextn.enorm.weight"), c, E, eps);
    for (int i = 0; i < E; i++) hb[i] = hprev[i];
    rms(hb, W(nv, "blk.%d.nextn.hnorm.weight"), c + E, E, eps);
    mv(W(nv, "blk.%d.nextn.eh_proj.weight"), c, x, 2 * E, E);
    /* 5: gated attention at position p */
    const int p = nv->n;
    rms(x, W(nv, "blk.%d.attn_norm.weight"), a, E, eps);
    mv(W(nv, "blk.%d.attn_q.weight"), a, qg, E, 2 * H * D);
    mv(W(nv, "blk.%d.attn_k.weight"), a, k, E, KV);
    mv(W(nv, "blk.%d.attn_v.weight"), a, v, E, KV);
    const float *qn = W(nv, "blk.%d.attn_q_norm.weight"), *kn = W(nv, "blk.%d.attn_k_norm.weight");
    double *q = calloc((size_t)H * D, sizeof *q);
    for (int h = 0; h < H; h++) rms(qg + (size_t)h * 2 * D, qn, q + (size_t)h * D, D, eps);
    for (int j = 0; j < Hkv; j++) rms(k + (size_t)j * D, kn, k + (size_t)j * D, D, eps);
    /* NeoX RoPE on the first R dims of each head: pair (i, i + R/2), angle p * base^(-2i/R) */
    double *vecs[2] = {q, k};
    int nheads[2] = {H, Hkv};
    for (int w = 0; w < 2; w++)
        for (int h = 0; h < nheads[w]; h++) {
            double *y = vecs[w] + (size_t)h * D;
            for (int i = 0; i < R / 2; i++) {
                double th = p * pow((double)hp->rope_base, -2.0 * i / R);
                double y0 = y[i], y1 = y[i + R / 2];
                y[i] = y0 * cos(th) - y1 * sin(th);
                y[i + R / 2] = y0 * sin(th) + y1 * cos(th);
            }
        }
    memcpy(nv->K + (size_t)p * KV, k, (size_t)KV * sizeof *k);
    memcpy(nv->V + (size_t)p * KV, v, (size_t)KV * sizeof *v);
    nv->n++;
    for (int h = 0; h < H; h++) {
        int j = h / (H / Hkv);
        double mx = -INFINITY, sum = 0;
        for (int t = 0; t <= p; t++) {
            double s = 0;
            for (int i = 0; i < D; i++) s += q[(size_t)h * D + i] * nv->K[(size_t)t * KV + (size_t)j * D + i];
            sc[t] = s / sqrt((double)D);
            mx = fmax(mx, sc[t]);
        }
        for (int t = 0; t <= p; t++) sum += (sc[t] = exp(sc[t] - mx));
        for (int i = 0; i < D; i++) {
            double acc = 0;
            for (int t = 0; t <= p; t++) acc += sc[t] / sum * nv->V[(size_t)t * KV + (size_t)j * D + i];
            att[(size_t)h * D + i] = acc * sigm(qg[(size_t)h * 2 * D + D + i]);
        }
    }
    mv(W(nv, "blk.%d.attn_output.weight"), att, o, H * D, E);
    for (int i = 0; i < E; i++) x[i] += o[i];
    /* 6: SwiGLU FFN */
    rms(x, W(nv, "blk.%d.post_attention_norm.weight"), a, E, eps);
    mv(W(nv, "blk.%d.ffn_gate.weight"), a, g, E, F);
    mv(W(nv, "blk.%d.ffn_up.weight"), a, u, E, F);
    for (int i = 0; i < F; i++) g[i] = g[i] * sigm(g[i]) * u[i];
    mv(W(nv, "blk.%d.ffn_down.weight"), g, o, F, E);
    for (int i = 0; i < E; i++) x[i] += o[i];
    /* 7-8: shared_head_norm, head (untied output.weight) */
    rms(x, W(nv, "blk.%d.nextn.shared_head_norm.weight"), hout, E, eps);
    assert_true(nx_mk_memory_lookup(nv->mem, "output.weight", &ti));
    mv(ti.data, hout, logits, E, V);
    free(e); free(c); free(x); free(a); free(qg); free(k); free(v); free(att); free(o); free(g); free(u);
    free(hb); free(sc); free(q);
}

static double rel_err(const float *got, const double *want, int n) {
    double num = 0, den = 0;
    for (int i = 0; i < n; i++) {
        num = fmax(num, fabs(got[i] - want[i]));
        den = fmax(den, fabs(want[i]));
    }
    return num / den;
}

/* Batched rows of two interleaved sequences, then single chained rows, then truncate + redo:
 * every logits row and hout row matches the naive version. */
static void test_mtp_matches_naive(void **state) {
    fixture *f = *state;
    nx_err err;
    nx_mtp_head *head;
    char notice[256];
    assert_true(nx_mtp_head_open(&head, &f->model, NULL, NULL, notice, sizeof notice, &err));
    assert_non_null(head);
    nx_mtp *m;
    if (!nx_mtp_create(&m, head, 32, 2, NX_KV_F32, NX_KV_F32, f->pool, &err)) fail_msg("%s", err.msg);
    const int E = (int)f->model.hp.n_embd, V = (int)f->model.hp.n_vocab, KV = (int)nx_hp_kv_dim(&f->model.hp);
    naive nv[2];
    for (int s = 0; s < 2; s++) {
        nv[s] = (naive){&f->model.hp, &f->mem, (int)f->model.hp.n_layer, 0, calloc(32 * (size_t)KV, sizeof(double)),
                        calloc(32 * (size_t)KV, sizeof(double))};
    }
    tu_rng rng;
    tu_rng_seed(&rng, 3);
    /* hidden inputs: post-norm-like vectors (rms ~ 1), zero for the first row of seq 0 */
    enum { N = 7 };
    float *h = calloc((size_t)N * E, sizeof *h);
    int32_t tok[N], pos[N], sid[N];
    int8_t lg[N];
    int n0 = 0, n1 = 0;
    for (int i = 0; i < N; i++) {
        sid[i] = i % 3 == 2 ? 1 : 0;
        pos[i] = sid[i] == 0 ? n0++ : n1++;
        tok[i] = (int32_t)(tu_rng_u64(&rng) % (uint64_t)V);
        lg[i] = 1;
        for (int j = 0; j < E; j++) h[(size_t)i * E + j] = i == 0 ? 0.0f : tu_rng_normal(&rng);
    }
    if (!nx_mtp_forward(m, N, tok, pos, sid, h, lg, &err)) fail_msg("%s", err.msg);
    double *wl = malloc((size_t)V * sizeof *wl), *wh = malloc((size_t)E * sizeof *wh);
    double worst = 0;
    for (int i = 0; i < N; i++) {
        naive_row(&nv[sid[i]], tok[i], h + (size_t)i * E, wl, wh);
        worst = fmax(worst, rel_err(nx_mtp_logits(m, i), wl, V));
        worst = fmax(worst, rel_err(nx_mtp_hidden(m) + (size_t)i * E, wh, E));
    }
    /* chained single rows on seq 1: hprev = the MTP's own exported hidden */
    float *hc = malloc((size_t)E * sizeof *hc);
    memcpy(hc, nx_mtp_hidden(m) + (size_t)(N - 1) * E, (size_t)E * sizeof *hc); /* last row is seq 0... */
    for (int step = 0; step < 3; step++) {
        int32_t t1 = (int32_t)(tu_rng_u64(&rng) % (uint64_t)V), p1 = nx_mtp_n_past(m, 1), s1 = 1;
        int8_t l1 = 1;
        if (!nx_mtp_forward(m, 1, &t1, &p1, &s1, hc, &l1, &err)) fail_msg("%s", err.msg);
        naive_row(&nv[1], t1, hc, wl, wh);
        worst = fmax(worst, rel_err(nx_mtp_logits(m, 0), wl, V));
        memcpy(hc, nx_mtp_hidden(m), (size_t)E * sizeof *hc);
    }
    /* truncate seq 0 by 2 and redo with other tokens */
    int32_t keep = nx_mtp_n_past(m, 0) - 2;
    assert_true(nx_mtp_truncate(m, 0, keep, &err));
    nv[0].n = keep;
    assert_int_equal(nx_mtp_n_past(m, 0), keep);
    for (int step = 0; step < 2; step++) {
        int32_t t0 = (int32_t)(tu_rng_u64(&rng) % (uint64_t)V), p0 = nx_mtp_n_past(m, 0), s0 = 0;
        int8_t l0 = 1;
        for (int j = 0; j < E; j++) hc[j] = tu_rng_normal(&rng);
        if (!nx_mtp_forward(m, 1, &t0, &p0, &s0, hc, &l0, &err)) fail_msg("%s", err.msg);
        naive_row(&nv[0], t0, hc, wl, wh);
        worst = fmax(worst, rel_err(nx_mtp_logits(m, 0), wl, V));
    }
    printf("MTP vs naive double: max relative error %.3g\n", worst);
    assert_true(worst < 2e-4);
    /* rows without logits give NULL */
    if (!nx_mtp_forward(m, 1, tok, (int32_t[]){nx_mtp_n_past(m, 0)}, (int32_t[]){0}, h, NULL, &err))
        fail_msg("%s", err.msg);
    assert_null(nx_mtp_logits(m, 0));
    for (int s = 0; s < 2; s++) { free(nv[s].K); free(nv[s].V); }
    free(h); free(hc); free(wl); free(wh);
    nx_mtp_free(m);
    nx_mtp_head_free(head);
}

/* Bad MTP batches are rejected with a message, nothing changes. */
static void test_mtp_bad_batch(void **state) {
    fixture *f = *state;
    nx_err err;
    nx_mtp_head *head;
    char notice[256];
    assert_true(nx_mtp_head_open(&head, &f->model, NULL, NULL, notice, sizeof notice, &err));
    nx_mtp *m;
    assert_true(nx_mtp_create(&m, head, 8, 1, NX_KV_F16, NX_KV_F16, f->pool, &err));
    float h[256] = {0};
    int32_t tok = 5, pos = 3, seq = 0;
    assert_false(nx_mtp_forward(m, 1, &tok, &pos, &seq, h, NULL, &err));
    assert_non_null(strstr(err.msg, "position 3, expected 0"));
    tok = 100000;
    pos = 0;
    assert_false(nx_mtp_forward(m, 1, &tok, &pos, &seq, h, NULL, &err));
    assert_non_null(strstr(err.msg, "token id 100000"));
    assert_int_equal(nx_mtp_n_past(m, 0), 0);
    nx_mtp_free(m);
    nx_mtp_head_free(head);
}

/* ---- files ------------------------------------------------------------------------------------ */

static void write_model(const char *path, const char *preset, uint32_t vocab, bool mtp, uint64_t seed) {
    nx_err err;
    nx_mk_options o = {.preset = preset, .type = NX_TYPE_F32, .seed = seed, .mtp = mtp, .n_vocab = vocab, .tie = -1};
    if (!nx_mkmodel_write(&o, path, NULL, &err)) fail_msg("%s", err.msg);
}

/* Loading MTP weights from the model, an mtp-only sibling, --mtp-model; `preset` with `L` trunk
 * layers (the MTP block is blk.L). */
static void mtp_files(fixture *f, const char *preset, int L) {
    nx_err err;
    char dir[256];
    snprintf(dir, sizeof dir, "%s", tu_tmp_path("mtpdir"));
    char cmd[600];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    assert_int_equal(system(cmd), 0);
    char full[400], trunk[400], side[400], other[400], broken[400], nomtp[400];
    snprintf(full, sizeof full, "%s/full.gguf", dir);
    snprintf(trunk, sizeof trunk, "%s/model.gguf", dir);
    snprintf(side, sizeof side, "%s/mtp-model.gguf", dir);
    snprintf(other, sizeof other, "%s/other-vocab.gguf", dir);
    snprintf(broken, sizeof broken, "%s/broken.gguf", dir);
    snprintf(nomtp, sizeof nomtp, "%s/nomtp.gguf", dir);
    write_model(full, preset, 0, true, 7);
    write_model(trunk, preset, 0, false, 7);
    write_model(other, preset, 600, true, 7);

    /* mtp-only file: no trunk tensors, loads as an MTP head */
    if (!nx_mtp_extract(full, side, &err)) fail_msg("%s", err.msg);
    nx_gguf *g;
    assert_true(nx_gguf_open(&g, side, &err));
    assert_null(nx_gguf_find_tensor(g, "blk.0.attn_norm.weight"));
    char eh[64];
    snprintf(eh, sizeof eh, "blk.%d.nextn.eh_proj.weight", L);
    assert_non_null(nx_gguf_find_tensor(g, eh));
    nx_gguf_close(g);
    nx_model *tm, *fm;
    if (!nx_model_load(&tm, trunk, true, &err)) fail_msg("%s", err.msg);
    assert_false(tm->mtp.present);
    char notice[256];
    nx_mtp_head *h = NULL;
    /* the sibling mtp-model.gguf is found automatically */
    if (!nx_mtp_head_open(&h, tm, trunk, NULL, notice, sizeof notice, &err)) fail_msg("%s", err.msg);
    assert_non_null(h);
    assert_non_null(strstr(h->source, "mtp-model.gguf"));
    /* ... and computes exactly what the full file's own MTP block computes */
    if (!nx_model_load(&fm, full, true, &err)) fail_msg("%s", err.msg);
    nx_mtp_head *hf = NULL;
    assert_true(nx_mtp_head_open(&hf, fm, full, NULL, notice, sizeof notice, &err));
    assert_ptr_equal(hf->src, fm);
    nx_mtp *a, *b;
    assert_true(nx_mtp_create(&a, h, 8, 1, NX_KV_F32, NX_KV_F32, f->pool, &err));
    assert_true(nx_mtp_create(&b, hf, 8, 1, NX_KV_F32, NX_KV_F32, f->pool, &err));
    float hid[256];
    for (int i = 0; i < 256; i++) hid[i] = (float)sin(i);
    int32_t tok = 42, pos = 0, seq = 0;
    int8_t lg = 1;
    assert_true(nx_mtp_forward(a, 1, &tok, &pos, &seq, hid, &lg, &err));
    assert_true(nx_mtp_forward(b, 1, &tok, &pos, &seq, hid, &lg, &err));
    assert_memory_equal(nx_mtp_logits(a, 0), nx_mtp_logits(b, 0), (size_t)tm->hp.n_vocab * sizeof(float));
    nx_mtp_free(a);
    nx_mtp_free(b);
    nx_mtp_head_free(h);
    nx_mtp_head_free(hf);

    /* explicit --mtp-model with another vocabulary: clear error naming the file */
    assert_false(nx_mtp_head_open(&h, tm, trunk, other, notice, sizeof notice, &err));
    assert_non_null(strstr(err.msg, "other-vocab.gguf"));
    assert_non_null(strstr(err.msg, "vocabulary"));
    /* explicit file without an MTP block */
    write_model(nomtp, preset, 0, false, 9);
    assert_false(nx_mtp_head_open(&h, tm, trunk, nomtp, notice, sizeof notice, &err));
    assert_non_null(strstr(err.msg, "nextn_predict_layers"));
    /* a truncated file */
    size_t len;
    void *bytes = tu_read_file(side, &len);
    FILE *fp = fopen(broken, "wb");
    fwrite(bytes, 1, len / 2, fp);
    fclose(fp);
    free(bytes);
    assert_false(nx_mtp_head_open(&h, tm, trunk, broken, notice, sizeof notice, &err));
    assert_non_null(strstr(err.msg, "MTP model"));
    assert_non_null(strstr(err.msg, "broken.gguf"));
    /* missing file */
    assert_false(nx_mtp_head_open(&h, tm, trunk, "/nonexistent/mtp-x.gguf", notice, sizeof notice, &err));
    assert_non_null(strstr(err.msg, "/nonexistent/mtp-x.gguf"));
    /* an mtp-only file with a tensor of the wrong shape: extract from the 600-token model but
     * then point a 512-token trunk at it -> the vocabulary check names both sizes */
    char side2[400];
    snprintf(side2, sizeof side2, "%s/mtp-600.gguf", dir);
    assert_true(nx_mtp_extract(other, side2, &err));
    assert_false(nx_mtp_head_open(&h, tm, trunk, side2, notice, sizeof notice, &err));
    assert_non_null(strstr(err.msg, "600"));
    assert_non_null(strstr(err.msg, "512"));
    /* the only sibling left is the mismatched one: found automatically and rejected clearly */
    unlink(side);
    assert_false(nx_mtp_head_open(&h, tm, trunk, NULL, notice, sizeof notice, &err));
    assert_non_null(strstr(err.msg, "mtp-600.gguf"));
    /* several candidates next to the model and none named mtp-model.gguf: ambiguous -> error */
    char side3[400];
    snprintf(side3, sizeof side3, "%s/mtp-another.gguf", dir);
    assert_true(nx_mtp_extract(full, side3, &err));
    assert_false(nx_mtp_head_open(&h, tm, trunk, NULL, notice, sizeof notice, &err));
    assert_non_null(strstr(err.msg, "mtp_model"));
    unlink(side2);
    unlink(side3);
    /* no MTP anywhere: success, no head, one-line notice */
    h = (nx_mtp_head *)1;
    assert_true(nx_mtp_head_open(&h, tm, trunk, NULL, notice, sizeof notice, &err));
    assert_null(h);
    assert_non_null(strstr(notice, "plain decoding"));
    nx_model_free(tm);
    nx_model_free(fm);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

static void test_mtp_files(void **state) { mtp_files(*state, "tiny", 6); }
/* qwen35moe: the MTP block is itself a MoE block; an mtp-only file keeps it whole */
static void test_mtp_files_moe(void **state) { mtp_files(*state, "tiny-moe", 4); }

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mtp_matches_naive),
        cmocka_unit_test(test_mtp_bad_batch),
        cmocka_unit_test(test_mtp_files),
        cmocka_unit_test(test_mtp_files_moe),
    };
    return cmocka_run_group_tests(tests, setup, tu_tiny_teardown);
}
