/* test_forward.c - the batched forward pass against an independent, plain double-precision
 * reference written straight from the model's definition (llama.cpp src/models/qwen35.cpp) (one token at a time, one
 * sequence), and the equivalences the engine promises: batch == token-by-token, two sequences
 * in one batch == each alone.  Model: the `tiny` preset (Hk=2 != Hv=4, GQA 4/2, D=128 != E/H=64,
 * 4 GDN + 2 attention layers), built in memory with F32 weights. 
 * The batching tests run again on `tiny-moe` (qwen35moe; its numerics against llama.cpp are
 * pinned by test_parity and the MoE block by test_moe).
 */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "forward/ctx_internal.h"
#include "forward/forward.h"
#include "convert/mkmodel.h"
#include "quant/quant.h"

/* ---- the reference --------------------------------------------------------------------- */

typedef struct ref_model {
    const nx_mk_memory *mem;
    const nx_hparams *hp;
    /* per-sequence state */
    double **conv;   /* [layer] -> [C][Kc-1] */
    double **S;      /* [layer] -> [Hv][d(i=key)][d(j=value)] */
    double **K, **V; /* [layer] -> [pos][Hkv*D] */
    int n_past;
    int max_pos;
} ref_model;

static const float *W(const ref_model *r, const char *fmt, int layer) {
    char name[128];
    snprintf(name, sizeof name, fmt, layer);
    nx_tensor_info ti;
    if (!nx_mk_memory_lookup((void *)r->mem, name, &ti)) fail_msg("reference: missing %s", name);
    assert_int_equal(ti.type, NX_TYPE_F32);
    return ti.data;
}

/* y[o] = sum_i W[o][i] x[i]; W stored {in, out}: row o has `in` elements */
static void ref_matvec(const float *w, const double *x, int in, int out, double *y) {
    for (int o = 0; o < out; o++) {
        double s = 0;
        for (int i = 0; i < in; i++) s += (double)w[(size_t)o * in + i] * x[i];
        y[o] = s;
    }
}

static void ref_rms(const double *x, const float *w, int n, double eps, double *y) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    double s = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++) y[i] = x[i] * s * (w ? (double)w[i] : 1.0);
}

static double sigm(double x) { return 1.0 / (1.0 + exp(-x)); }
static double silu(double x) { return x * sigm(x); }

static void ref_init(ref_model *r, const nx_mk_memory *mem, int max_pos) {
    memset(r, 0, sizeof *r);
    r->mem = mem;
    r->hp = &mem->hp;
    r->max_pos = max_pos;
    const nx_hparams *hp = r->hp;
    int L = (int)hp->n_layer, C = (int)nx_hp_conv_dim(hp), d = (int)hp->ssm_d_state, Hv = (int)hp->ssm_dt_rank;
    r->conv = calloc((size_t)L, sizeof *r->conv);
    r->S = calloc((size_t)L, sizeof *r->S);
    r->K = calloc((size_t)L, sizeof *r->K);
    r->V = calloc((size_t)L, sizeof *r->V);
    for (int l = 0; l < L; l++) {
        if (hp->recurrent[l]) {
            r->conv[l] = calloc((size_t)C * (hp->ssm_conv_kernel - 1), sizeof(double));
            r->S[l] = calloc((size_t)Hv * d * d, sizeof(double));
        } else {
            r->K[l] = calloc((size_t)max_pos * nx_hp_kv_dim(hp), sizeof(double));
            r->V[l] = calloc((size_t)max_pos * nx_hp_kv_dim(hp), sizeof(double));
        }
    }
}

static void ref_free(ref_model *r) {
    for (uint32_t l = 0; l < r->hp->n_layer; l++) {
        free(r->conv[l]); free(r->S[l]); free(r->K[l]); free(r->V[l]);
    }
    free(r->conv); free(r->S); free(r->K); free(r->V);
}

/* Gated DeltaNet for one token */
static void ref_gdn(ref_model *r, int l, const double *a, double *m) {
    const nx_hparams *hp = r->hp;
    const int E = (int)hp->n_embd, C = (int)nx_hp_conv_dim(hp), Hk = (int)hp->ssm_n_group;
    const int Hv = (int)hp->ssm_dt_rank, d = (int)hp->ssm_d_state, Kc = (int)hp->ssm_conv_kernel;
    const int key_dim = Hk * d, VD = Hv * d;
    const double eps = hp->eps;
    double *qkv = calloc((size_t)C, sizeof(double)), *z = calloc((size_t)VD, sizeof(double));
    double *bb = calloc((size_t)Hv, sizeof(double)), *al = calloc((size_t)Hv, sizeof(double));
    double *y = calloc((size_t)C, sizeof(double)), *o = calloc((size_t)VD, sizeof(double));
    ref_matvec(W(r, "blk.%d.attn_qkv.weight", l), a, E, C, qkv);
    ref_matvec(W(r, "blk.%d.attn_gate.weight", l), a, E, VD, z);
    ref_matvec(W(r, "blk.%d.ssm_beta.weight", l), a, E, Hv, bb);
    ref_matvec(W(r, "blk.%d.ssm_alpha.weight", l), a, E, Hv, al);
    const float *cw = W(r, "blk.%d.ssm_conv1d.weight", l);
    const float *A = W(r, "blk.%d.ssm_a", l), *dt = W(r, "blk.%d.ssm_dt.bias", l);
    const float *nw = W(r, "blk.%d.ssm_norm.weight", l);
    /* conv: u = [state, x]; y = sum_i u[i] w[i]; state = last Kc-1 of u */
    for (int c = 0; c < C; c++) {
        double *st = r->conv[l] + (size_t)c * (Kc - 1);
        double acc = qkv[c] * cw[(size_t)c * Kc + Kc - 1];
        for (int i = 0; i < Kc - 1; i++) acc += st[i] * cw[(size_t)c * Kc + i];
        for (int i = 0; i < Kc - 2; i++) st[i] = st[i + 1];
        st[Kc - 2] = qkv[c];
        y[c] = silu(acc);
    }
    /* L2 norms, q scale */
    for (int g = 0; g < 2 * Hk; g++) {
        double ss = 0;
        for (int i = 0; i < d; i++) ss += y[g * d + i] * y[g * d + i];
        double nrm = sqrt(ss);
        if (nrm < eps) nrm = eps;
        for (int i = 0; i < d; i++) y[g * d + i] /= nrm;
        if (g < Hk)
            for (int i = 0; i < d; i++) y[g * d + i] /= sqrt((double)d);
    }
    for (int h = 0; h < Hv; h++) {
        const double beta = sigm(bb[h]);
        const double x = al[h] + dt[h];
        const double gg = A[h] * (x > 20 ? x : log(1 + exp(x)));
        const double *q = y + (h % Hk) * d, *k = y + key_dim + (h % Hk) * d, *v = y + 2 * key_dim + h * d;
        double *S = r->S[l] + (size_t)h * d * d; /* S[i*d + j], i key, j value */
        for (int i = 0; i < d * d; i++) S[i] *= exp(gg);
        for (int j = 0; j < d; j++) {
            double u = 0;
            for (int i = 0; i < d; i++) u += S[i * d + j] * k[i];
            double delta = beta * (v[j] - u);
            for (int i = 0; i < d; i++) S[i * d + j] += k[i] * delta;
        }
        for (int j = 0; j < d; j++) {
            double s = 0;
            for (int i = 0; i < d; i++) s += S[i * d + j] * q[i];
            o[h * d + j] = s;
        }
        /* gated RMSNorm */
        double tmp[512];
        ref_rms(o + h * d, nw, d, eps, tmp);
        for (int j = 0; j < d; j++) o[h * d + j] = tmp[j] * silu(z[h * d + j]);
    }
    ref_matvec(W(r, "blk.%d.ssm_out.weight", l), o, VD, E, m);
    free(qkv); free(z); free(bb); free(al); free(y); free(o);
}

/* gated attention for one token at position pos */
static void ref_attn(ref_model *r, int l, const double *a, int pos, double *m) {
    const nx_hparams *hp = r->hp;
    const int E = (int)hp->n_embd, H = (int)hp->n_head, Hkv = (int)hp->n_head_kv, D = (int)hp->head_dim;
    const int R = (int)hp->n_rot, KV = Hkv * D;
    double *qf = calloc((size_t)2 * H * D, sizeof(double)), *k = calloc((size_t)KV, sizeof(double));
    double *v = calloc((size_t)KV, sizeof(double)), *out = calloc((size_t)H * D, sizeof(double));
    double *sc = calloc((size_t)pos + 1, sizeof(double)), *q = calloc((size_t)H * D, sizeof(double));
    ref_matvec(W(r, "blk.%d.attn_q.weight", l), a, E, 2 * H * D, qf);
    ref_matvec(W(r, "blk.%d.attn_k.weight", l), a, E, KV, k);
    ref_matvec(W(r, "blk.%d.attn_v.weight", l), a, E, KV, v);
    const float *qn = W(r, "blk.%d.attn_q_norm.weight", l), *kn = W(r, "blk.%d.attn_k_norm.weight", l);
    for (int h = 0; h < H; h++) ref_rms(qf + 2 * h * D, qn, D, hp->eps, q + h * D);
    for (int g = 0; g < Hkv; g++) ref_rms(k + g * D, kn, D, hp->eps, k + g * D);
    /* NeoX partial rope: pair (p, p+R/2), theta = pos * base^(-2p/R) */
    for (int hh = 0; hh < H + Hkv; hh++) {
        double *x = hh < H ? q + hh * D : k + (hh - H) * D;
        for (int p = 0; p < R / 2; p++) {
            double th = pos * pow((double)hp->rope_base, -2.0 * p / R);
            double x0 = x[p], x1 = x[p + R / 2];
            x[p] = x0 * cos(th) - x1 * sin(th);
            x[p + R / 2] = x0 * sin(th) + x1 * cos(th);
        }
    }
    memcpy(r->K[l] + (size_t)pos * KV, k, (size_t)KV * sizeof(double));
    memcpy(r->V[l] + (size_t)pos * KV, v, (size_t)KV * sizeof(double));
    for (int h = 0; h < H; h++) {
        int g = h / (H / Hkv);
        double mx = -1e300, sum = 0;
        for (int t = 0; t <= pos; t++) {
            double s = 0;
            for (int i = 0; i < D; i++) s += q[h * D + i] * r->K[l][(size_t)t * KV + g * D + i];
            sc[t] = s / sqrt((double)D);
            if (sc[t] > mx) mx = sc[t];
        }
        for (int t = 0; t <= pos; t++) sum += (sc[t] = exp(sc[t] - mx));
        for (int i = 0; i < D; i++) {
            double acc = 0;
            for (int t = 0; t <= pos; t++) acc += sc[t] / sum * r->V[l][(size_t)t * KV + g * D + i];
            out[h * D + i] = acc * sigm(qf[2 * h * D + D + i]);
        }
    }
    ref_matvec(W(r, "blk.%d.attn_output.weight", l), out, H * D, E, m);
    free(qf); free(k); free(v); free(out); free(sc); free(q);
}

/* one token; writes the post-norm hidden (E) and logits (V) */
static void ref_token(ref_model *r, int token, double *hidden, double *logits) {
    const nx_hparams *hp = r->hp;
    const int E = (int)hp->n_embd, F = (int)hp->n_ff, V = (int)hp->n_vocab;
    const int pos = r->n_past++;
    assert_true(pos < r->max_pos);
    double *x = calloc((size_t)E, sizeof(double)), *a = calloc((size_t)E, sizeof(double));
    double *m = calloc((size_t)E, sizeof(double));
    double *g = calloc((size_t)F, sizeof(double)), *u = calloc((size_t)F, sizeof(double));
    const float *emb = W(r, "token_embd.weight", 0);
    for (int i = 0; i < E; i++) x[i] = emb[(size_t)token * E + i];
    for (int l = 0; l < (int)hp->n_layer; l++) {
        ref_rms(x, W(r, "blk.%d.attn_norm.weight", l), E, hp->eps, a);
        if (hp->recurrent[l]) ref_gdn(r, l, a, m);
        else ref_attn(r, l, a, pos, m);
        for (int i = 0; i < E; i++) x[i] += m[i];
        ref_rms(x, W(r, "blk.%d.post_attention_norm.weight", l), E, hp->eps, a);
        ref_matvec(W(r, "blk.%d.ffn_gate.weight", l), a, E, F, g);
        ref_matvec(W(r, "blk.%d.ffn_up.weight", l), a, E, F, u);
        for (int i = 0; i < F; i++) g[i] = silu(g[i]) * u[i];
        ref_matvec(W(r, "blk.%d.ffn_down.weight", l), g, F, E, m);
        for (int i = 0; i < E; i++) x[i] += m[i];
    }
    ref_rms(x, W(r, "output_norm.weight", 0), E, hp->eps, hidden);
    nx_tensor_info ti;
    const float *head = nx_mk_memory_lookup((void *)r->mem, "output.weight", &ti) ? ti.data : emb;
    ref_matvec(head, hidden, E, V, logits);
    free(x); free(a); free(m); free(g); free(u);
}

/* ---- fixtures ----------------------------------------------------------------------------- */

typedef tu_tiny fixture;

static int setup(void **state) {
    *state = tu_tiny_new("tiny", 42, true, -1);
    return 0;
}

static int setup_moe(void **state) {
    *state = tu_tiny_new("tiny-moe", 42, true, -1);
    return 0;
}

static void gen_tokens(int32_t *t, int n, uint64_t seed, int V) {
    tu_rng r;
    tu_rng_seed(&r, seed);
    for (int i = 0; i < n; i++) t[i] = (int32_t)(tu_rng_u64(&r) % (uint64_t)V);
}

/* ---- tests ---------------------------------------------------------------------------------- */

static void test_tiny_shapes_cover_the_hard_cases(void **state) {
    fixture *f = *state;
    const nx_hparams *hp = &f->model.hp;
    assert_true(hp->ssm_n_group != hp->ssm_dt_rank);        /* Hk != Hv */
    assert_true(hp->n_head != hp->n_head_kv);               /* GQA */
    assert_true(hp->head_dim != hp->n_embd / hp->n_head);   /* D != E/H */
    assert_true(f->model.n_gdn_layers >= 2 && f->model.n_attn_layers >= 2);
    assert_false(f->model.tied);
    assert_true(f->model.mtp.present);
}

static void test_matches_double_reference(void **state) {
    fixture *f = *state;
    const nx_hparams *hp = &f->model.hp;
    const int n = 20, V = (int)hp->n_vocab, E = (int)hp->n_embd;
    int32_t toks[20];
    gen_tokens(toks, n, 7, V);
    ref_model r;
    ref_init(&r, &f->mem, 64);
    double *rh = calloc((size_t)n * E, sizeof(double)), *rl = calloc((size_t)n * V, sizeof(double));
    for (int i = 0; i < n; i++) ref_token(&r, toks[i], rh + (size_t)i * E, rl + (size_t)i * V);
    ref_free(&r);

    /* whole prompt in one batch (F32 KV), then the same again with 3 batches (13 + 6 + 1) and
     * the plain C kernels instead of the AVX-512 ones (when the CPU has them) */
    for (int variant = 0; variant < 2; variant++) {
        nx_ctx *c = tu_tiny_ctx(f, 64, 1, 0, NX_KV_F32);
        if (variant == 1) c->run.avx512 = false;
        int cuts[] = {0, variant ? 13 : n, variant ? 19 : n, n};
        double worst_l = 0, worst_h = 0, scale = 0;
        for (int k = 0; k < 3; k++) {
            int b0 = cuts[k], b1 = cuts[k + 1];
            if (b1 <= b0) continue;
            tu_decode(c, 0, toks + b0, b1 - b0);
            for (int i = b0; i < b1; i++) {
                const float *lg = nx_ctx_logits(c, i - b0);
                const float *hd = nx_ctx_hidden(c) + (size_t)(i - b0) * E;
                assert_non_null(lg);
                int am_ref = 0, am = 0;
                for (int v = 0; v < V; v++) {
                    worst_l = fmax(worst_l, fabs(lg[v] - rl[(size_t)i * V + v]));
                    scale = fmax(scale, fabs(rl[(size_t)i * V + v]));
                    if (rl[(size_t)i * V + v] > rl[(size_t)i * V + am_ref]) am_ref = v;
                    if (lg[v] > lg[am]) am = v;
                }
                assert_int_equal(am, am_ref);
                for (int e = 0; e < E; e++) worst_h = fmax(worst_h, fabs(hd[e] - rh[(size_t)i * E + e]));
            }
        }
        /* logits are O(1) here; F32 engine vs double reference should agree to ~1e-5 */
        if (worst_l > 2e-4 * fmax(1.0, scale) || worst_h > 2e-4)
            fail_msg("variant %d: logits max diff %g (scale %g), hidden max diff %g", variant, worst_l, scale, worst_h);
        nx_ctx_free(c);
    }
    free(rh);
    free(rl);
}

static void test_batch_equals_token_by_token(void **state) {
    fixture *f = *state;
    const int n = 16, V = (int)f->model.hp.n_vocab, E = (int)f->model.hp.n_embd;
    int32_t toks[16];
    gen_tokens(toks, n, 11, V);
    for (int kv = 0; kv < 2; kv++) {
        nx_ctx *a = tu_tiny_ctx(f, 64, 1, 0, kv ? NX_KV_F32 : NX_KV_F16), *b = tu_tiny_ctx(f, 64, 1, 0, kv ? NX_KV_F32 : NX_KV_F16);
        tu_decode(a, 0, toks, n);
        for (int i = 0; i < n; i++) {
            tu_decode(b, 0, toks + i, 1);
            assert_true(tu_max_abs_diff(nx_ctx_logits(a, i), nx_ctx_logits(b, 0), V) < 1e-4);
            assert_true(tu_max_abs_diff(nx_ctx_hidden(a) + (size_t)i * E, nx_ctx_hidden(b), E) < 1e-5);
        }
        assert_int_equal(nx_ctx_n_past(a, 0), n);
        nx_ctx_free(a);
        nx_ctx_free(b);
    }
}

static void test_two_sequences_in_one_batch_equal_each_alone(void **state) {
    fixture *f = *state;
    const int n = 9, V = (int)f->model.hp.n_vocab, E = (int)f->model.hp.n_embd;
    int32_t A[9], B[9];
    gen_tokens(A, n, 21, V);
    gen_tokens(B, n, 22, V);
    nx_ctx *both = tu_tiny_ctx(f, 64, 2, 0, NX_KV_F16), *one = tu_tiny_ctx(f, 64, 1, 0, NX_KV_F16);
    /* warm seq 1 with 3 tokens first so the two sequences sit at different positions */
    tu_decode(both, 1, B, 3);
    /* then interleave: rows alternate A[i] (seq 0) and B[3+i] (seq 1), seq 1 has fewer rows */
    int32_t tok[32], pos[32], sid[32];
    int8_t lg[32];
    int T = 0, ia = 0, ib = 3;
    while (ia < n || ib < n) {
        if (ia < n) { tok[T] = A[ia]; pos[T] = ia; sid[T] = 0; lg[T] = 1; T++; ia++; }
        if (ib < n) { tok[T] = B[ib]; pos[T] = ib; sid[T] = 1; lg[T] = 1; T++; ib++; }
    }
    nx_batch bt = {T, tok, pos, sid, lg};
    nx_err err;
    if (!nx_forward(both, &bt, &err)) fail_msg("%s", err.msg);
    float *lb = malloc((size_t)T * V * sizeof(float)), *hb = malloc((size_t)T * E * sizeof(float));
    for (int t = 0; t < T; t++) memcpy(lb + (size_t)t * V, nx_ctx_logits(both, t), (size_t)V * sizeof(float));
    memcpy(hb, nx_ctx_hidden(both), (size_t)T * E * sizeof(float));
    for (int s = 0; s < 2; s++) {
        const int32_t *X = s ? B : A;
        nx_ctx_seq_clear(one, 0, NULL);
        tu_decode(one, 0, X, n);
        for (int t = 0; t < T; t++) {
            if (sid[t] != s) continue;
            assert_true(tu_max_abs_diff(lb + (size_t)t * V, nx_ctx_logits(one, pos[t]), V) < 1e-4);
            assert_true(tu_max_abs_diff(hb + (size_t)t * E, nx_ctx_hidden(one) + (size_t)pos[t] * E, E) < 1e-5);
        }
    }
    free(lb);
    free(hb);
    nx_ctx_free(both);
    nx_ctx_free(one);
}

/* Quantized caches (q8_0 / q4_0 K and V): every row's logits are bit-identical whether the rows
 * come one at a time, as a prompt batch, or as verify-like chunks of 4 (the speculative
 * exactness rests on it), with the AVX-512 kernels and with the plain C ones.  The cache really
 * is quantized: the logits differ from the f16 cache's, but only by quantization noise. */
static void test_quantized_cache_batch_invariant(void **state) {
    fixture *f = *state;
    enum { N = 18 };
    const int V = (int)f->model.hp.n_vocab;
    int32_t toks[N];
    gen_tokens(toks, N, 31, V);
    float *ref = malloc((size_t)N * V * sizeof(float)), *f16l = malloc((size_t)N * V * sizeof(float));
    nx_ctx *h = tu_tiny_ctx(f, 64, 1, 0, NX_KV_F16);
    for (int i = 0; i < N; i++) {
        tu_decode(h, 0, toks + i, 1);
        memcpy(f16l + (size_t)i * V, nx_ctx_logits(h, 0), (size_t)V * sizeof(float));
    }
    nx_ctx_free(h);
    const nx_kv_type types[] = {NX_KV_Q8_0, NX_KV_Q4_0};
    for (int ti = 0; ti < 2; ti++)
        for (int simd = 0; simd < 2; simd++) {
            if (simd && nx_cpu_isa() < NX_ISA_AVX512) continue;
            nx_ctx *one = tu_tiny_ctx(f, 64, 1, 0, types[ti]), *bat = tu_tiny_ctx(f, 64, 1, 0, types[ti]);
            one->run.avx512 = bat->run.avx512 = simd;
            for (int i = 0; i < N; i++) {
                tu_decode(one, 0, toks + i, 1);
                memcpy(ref + (size_t)i * V, nx_ctx_logits(one, 0), (size_t)V * sizeof(float));
            }
            const int cuts[] = {0, 7, 11, 15, N}; /* a prompt of 7, then chunks of 4, 4, 3 */
            for (int k = 0; k < 4; k++) {
                tu_decode(bat, 0, toks + cuts[k], cuts[k + 1] - cuts[k]);
                for (int i = cuts[k]; i < cuts[k + 1]; i++)
                    if (memcmp(nx_ctx_logits(bat, i - cuts[k]), ref + (size_t)i * V, (size_t)V * sizeof(float)))
                        fail_msg("%s cache, %s kernels: row %d of a batch differs from the 1-row decode",
                                 nx_kv_type_name(types[ti]), simd ? "AVX-512" : "plain", i);
            }
            const double d = tu_max_abs_diff(ref + (size_t)(N - 1) * V, f16l + (size_t)(N - 1) * V, V);
            /* step / max of a block: 1/127 (q8_0), 1/8 (q4_0); logits here are O(1): 0.0045 / 0.086 seen */
            if (!(d > 0.0 && d < (types[ti] == NX_KV_Q8_0 ? 0.03 : 0.4)))
                fail_msg("%s cache: last logits differ from the f16 cache's by %g (want quantization noise)",
                         nx_kv_type_name(types[ti]), d);
            nx_ctx_free(one);
            nx_ctx_free(bat);
        }
    free(ref);
    free(f16l);
}

/* A quantized cache type needs head_dim % 32 == 0: the error names the field and the limit. */
static void test_quantized_cache_needs_head_dim_multiple_of_32(void **state) {
    fixture *f = *state;
    const uint32_t D = f->model.hp.head_dim;
    f->model.hp.head_dim = 80;
    nx_ctx_params p = nx_ctx_default_params();
    p.n_ctx = 16;
    p.kv_type_v = NX_KV_Q4_0;
    nx_ctx *c = NULL;
    nx_err err;
    const bool ok = nx_ctx_create(&c, &f->model, &p, f->pool, &err);
    f->model.hp.head_dim = D;
    assert_false(ok);
    if (!strstr(err.msg, "kv_type_v q4_0") || !strstr(err.msg, "multiple of 32") || !strstr(err.msg, "80"))
        fail_msg("unexpected message: %s", err.msg);
    p.kv_type_v = (nx_kv_type)7;
    assert_false(nx_ctx_create(&c, &f->model, &p, f->pool, &err));
    assert_non_null(strstr(err.msg, "kv_type_v 7"));
}

static void test_logits_only_for_requested_rows(void **state) {
    fixture *f = *state;
    nx_ctx *c = tu_tiny_ctx(f, 64, 1, 0, NX_KV_F16);
    int32_t tok[4] = {1, 2, 3, 4}, pos[4] = {0, 1, 2, 3};
    int8_t lg[4] = {0, 1, 0, 1};
    nx_batch b = {4, tok, pos, NULL, lg};
    nx_err err;
    assert_true(nx_forward(c, &b, &err));
    assert_null(nx_ctx_logits(c, 0));
    assert_non_null(nx_ctx_logits(c, 1));
    assert_null(nx_ctx_logits(c, 2));
    assert_non_null(nx_ctx_logits(c, 3));
    /* default (logits == NULL): last row only */
    int32_t t2[2] = {5, 6}, p2[2] = {4, 5};
    nx_batch b2 = {2, t2, p2, NULL, NULL};
    assert_true(nx_forward(c, &b2, &err));
    assert_null(nx_ctx_logits(c, 0));
    assert_non_null(nx_ctx_logits(c, 1));
    assert_null(nx_ctx_logits(c, 2));
    nx_ctx_free(c);
}

static void test_bad_batches_are_rejected_clearly(void **state) {
    fixture *f = *state;
    nx_ctx *c = tu_tiny_ctx(f, 64, 2, 0, NX_KV_F16);
    nx_err err;
    int32_t tok[2] = {1, 2}, pos[2] = {0, 2}, sid[2] = {0, 0};
    nx_batch b = {2, tok, pos, sid, NULL};
    assert_false(nx_forward(c, &b, &err)); /* gap */
    assert_non_null(strstr(err.msg, "position 2, expected 1"));
    pos[1] = 1;
    sid[1] = 5;
    assert_false(nx_forward(c, &b, &err));
    assert_non_null(strstr(err.msg, "sequence id 5"));
    sid[1] = 0;
    tok[0] = (int32_t)f->model.hp.n_vocab;
    assert_false(nx_forward(c, &b, &err));
    assert_non_null(strstr(err.msg, "token id"));
    tok[0] = -1;
    assert_false(nx_forward(c, &b, &err));
    tok[0] = 3;
    int32_t far[1] = {64}, t1[1] = {1};
    nx_batch b2 = {1, t1, far, NULL, NULL};
    assert_false(nx_forward(c, &b2, &err));
    nx_batch b3 = {0, tok, pos, NULL, NULL};
    assert_false(nx_forward(c, &b3, &err));
    /* nothing was committed by the failures */
    assert_int_equal(nx_ctx_n_past(c, 0), 0);
    assert_true(nx_forward(c, &b, &err));
    assert_int_equal(nx_ctx_n_past(c, 0), 2);
    nx_ctx_free(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiny_shapes_cover_the_hard_cases),
        cmocka_unit_test(test_matches_double_reference),
        cmocka_unit_test(test_batch_equals_token_by_token),
        cmocka_unit_test(test_two_sequences_in_one_batch_equal_each_alone),
        cmocka_unit_test(test_logits_only_for_requested_rows),
        cmocka_unit_test(test_bad_batches_are_rejected_clearly),
        cmocka_unit_test(test_quantized_cache_batch_invariant),
        cmocka_unit_test(test_quantized_cache_needs_head_dim_multiple_of_32),
    };
    const struct CMUnitTest moe_tests[] = {
        cmocka_unit_test(test_batch_equals_token_by_token),
        cmocka_unit_test(test_two_sequences_in_one_batch_equal_each_alone),
        cmocka_unit_test(test_logits_only_for_requested_rows),
        cmocka_unit_test(test_bad_batches_are_rejected_clearly),
    };
    int rc = cmocka_run_group_tests_name("qwen35 (tiny)", tests, setup, tu_tiny_teardown);
    return rc + cmocka_run_group_tests_name("qwen35moe (tiny-moe)", moe_tests, setup_moe, tu_tiny_teardown);
}
