/* test_convert.c - HF checkpoint -> GGUF conversion.
 *
 * Fixtures (tests/fixtures/README.md): two random-init Qwen3.5 checkpoints in Hugging Face layout
 * made by tools/reference/make_checkpoint.py, and logits computed from them by the independent
 * PyTorch reference tools/reference/qwen35_ref.py (HF conventions, float64).
 *   a: BF16, untied head, linear k-heads 2 != v-heads 4, GQA 4/2, MTP, one file
 *   b: F16, tied head, linear k-heads 2 != v-heads 6, GQA 4/1, MTP, 3 shards, "a b" merges
 *   c: BF16, Qwen3_5ForConditionalGeneration layout, k-heads 1 != v-heads 4, chat_template.jinja
 * Checks:
 *   - convert -> nextn forward: logits match the reference, argmax equal on every row; the same
 *     for the MTP head's logits (single file, and --no-mtp trunk + --mtp head file);
 *   - the transformations, checked value by value against the safetensors source from their
 *     definitions (+1 on zero-centred norms, none on linear_attn.norm, -exp(A_log), V-head
 *     permutation grouped -> tiled in every affected tensor, conv1d squeeze);
 *   - keys (values from config.json), vocabulary padding, output types per tensor;
 *   - Q8_0 output == the quantiser applied to the F32 conversion;
 *   - --mtp + --no-mtp files together hold exactly the single file's tensors and bytes.
 */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert/convert.h"
#include "forward/forward.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "spec/mtp.h"
#include "quant/quant.h"
#include "convert/safetensors.h"

#define N_VOCAB 320

/* Every file a test writes; removed at the end. */
static char outputs[32][512];
static int n_outputs;

static const char *convert_to(const char *fixture, uint32_t type, nx_convert_mtp mtp, const char *tag) {
    assert_true(n_outputs < 32);
    char *o = outputs[n_outputs++];
    snprintf(o, 512, "%s", tu_tmp_path(tag));
    char dir[512];
    snprintf(dir, sizeof dir, "%s", tu_src_path(fixture));
    nx_convert_opts opts = {.out_type = type, .mtp = mtp};
    nx_err err;
    if (!nx_convert_hf(dir, o, &opts, &err)) fail_msg("convert %s: %s", fixture, err.msg);
    return o;
}

/* Runs the trunk on the fixture tokens and compares every row's logits with the reference. */
static void check_logits(const char *gguf, const char *ref_bin, double tol) {
    int32_t tok[64], pos[64];
    int8_t want[64];
    int n = tu_read_tokens("tests/fixtures/ref-qwen35.tokens", tok, 64);
    size_t len;
    float *ref = tu_read_file(tu_src_path(ref_bin), &len);
    assert_non_null(ref);
    assert_int_equal(len, (size_t)n * N_VOCAB * sizeof(float));
    nx_model *m;
    nx_err err;
    if (!nx_model_load(&m, gguf, false, &err)) fail_msg("load: %s", err.msg);
    assert_int_equal(m->hp.n_vocab, N_VOCAB);
    nx_pool *pool = nx_pool_create(1, &err);
    assert_non_null(pool);
    nx_ctx_params cp = nx_ctx_default_params();
    cp.n_ctx = 64;
    cp.kv_type = NX_KV_F32;
    cp.kv_type_v = NX_KV_F32;
    nx_ctx *ctx;
    if (!nx_ctx_create(&ctx, m, &cp, pool, &err)) fail_msg("ctx: %s", err.msg);
    for (int i = 0; i < n; i++) { pos[i] = i; want[i] = 1; }
    nx_batch b = {.n_tokens = n, .token = tok, .pos = pos, .logits = want};
    if (!nx_forward(ctx, &b, &err)) fail_msg("forward: %s", err.msg);
    double worst = 0;
    for (int r = 0; r < n; r++) {
        const float *lg = nx_ctx_logits(ctx, r), *rf = ref + (size_t)r * N_VOCAB;
        int am = 0, ar = 0;
        for (int v = 0; v < N_VOCAB; v++) {
            double d = fabs((double)lg[v] - rf[v]);
            if (!(d <= worst)) worst = d; /* also catches NaN */
            if (lg[v] > lg[am]) am = v;
            if (rf[v] > rf[ar]) ar = v;
        }
        if (am != ar) fail_msg("%s row %d: argmax %d, reference %d", gguf, r, am, ar);
    }
    print_message("%s: max |logit - reference| = %.3g (tolerance %g)\n", strrchr(gguf, '-') ? strrchr(gguf, '-') + 1 : gguf, worst, tol);
    if (!(worst <= tol)) fail_msg("%s: max |logit - reference| = %g > %g", gguf, worst, tol);
    nx_ctx_free(ctx);
    nx_pool_free(pool);
    nx_model_free(m);
    free(ref);
}

/* MTP head vs the reference's MTP logits: row p = (token p, trunk hidden of p-1), row 0 with a
 * zero hidden.  The head comes from the trunk file itself (mtp_file NULL) or from a separate
 * mtp-only file next to a --no-mtp trunk. */
static void check_mtp_logits(const char *gguf, const char *mtp_file, const char *ref_bin, double tol) {
    int32_t tok[64], pos[64];
    int8_t want[64];
    int n = tu_read_tokens("tests/fixtures/ref-qwen35.tokens", tok, 64);
    size_t len;
    float *ref = tu_read_file(tu_src_path(ref_bin), &len);
    assert_non_null(ref);
    assert_int_equal(len, (size_t)n * N_VOCAB * sizeof(float));
    nx_model *m;
    nx_err err;
    if (!nx_model_load(&m, gguf, mtp_file == NULL, &err)) fail_msg("load: %s", err.msg);
    nx_pool *pool = nx_pool_create(1, &err);
    nx_ctx_params cp = nx_ctx_default_params();
    cp.n_ctx = 64;
    cp.kv_type = NX_KV_F32;
    cp.kv_type_v = NX_KV_F32;
    nx_ctx *ctx;
    if (!nx_ctx_create(&ctx, m, &cp, pool, &err)) fail_msg("ctx: %s", err.msg);
    for (int i = 0; i < n; i++) { pos[i] = i; want[i] = 1; }
    nx_batch b = {.n_tokens = n, .token = tok, .pos = pos, .logits = want};
    if (!nx_forward(ctx, &b, &err)) fail_msg("forward: %s", err.msg);
    const int E = (int)m->hp.n_embd;
    float *hprev = calloc((size_t)n * E, sizeof *hprev);
    memcpy(hprev + E, nx_ctx_hidden(ctx), (size_t)(n - 1) * E * sizeof *hprev);
    nx_mtp_head *head;
    char notice[256];
    if (!nx_mtp_head_open(&head, m, gguf, mtp_file, notice, sizeof notice, &err)) fail_msg("mtp head: %s", err.msg);
    if (!head) fail_msg("no MTP head: %s", notice);
    nx_mtp *mtp;
    if (!nx_mtp_create(&mtp, head, 64, 1, NX_KV_F32, NX_KV_F32, pool, &err)) fail_msg("mtp: %s", err.msg);
    if (!nx_mtp_forward(mtp, n, tok, pos, NULL, hprev, want, &err)) fail_msg("mtp forward: %s", err.msg);
    double worst = 0;
    for (int r = 0; r < n; r++) {
        const float *lg = nx_mtp_logits(mtp, r), *rf = ref + (size_t)r * N_VOCAB;
        int am = 0, ar = 0;
        for (int v = 0; v < N_VOCAB; v++) {
            double d = fabs((double)lg[v] - rf[v]);
            if (!(d <= worst)) worst = d;
            if (lg[v] > lg[am]) am = v;
            if (rf[v] > rf[ar]) ar = v;
        }
        if (am != ar) fail_msg("%s MTP row %d: argmax %d, reference %d", gguf, r, am, ar);
    }
    print_message("%s: MTP max |logit - reference| = %.3g (tolerance %g)\n", mtp_file ? "split files" : "single file",
                  worst, tol);
    if (!(worst <= tol)) fail_msg("%s: MTP max |logit - reference| = %g > %g", gguf, worst, tol);
    nx_mtp_free(mtp);
    nx_mtp_head_free(head);
    free(hprev);
    nx_ctx_free(ctx);
    nx_pool_free(pool);
    nx_model_free(m);
    free(ref);
}

static void test_mtp_logits(void **s) {
    (void)s;
    check_mtp_logits(convert_to("tests/fixtures/hf-qwen35-a", NX_TYPE_F32, NX_CONVERT_MTP_EMBED, "ma32.gguf"), NULL,
                     "tests/fixtures/ref-qwen35-a.mtp.bin", 1e-4);
    check_mtp_logits(convert_to("tests/fixtures/hf-qwen35-c", NX_TYPE_F32, NX_CONVERT_MTP_EMBED, "mc32.gguf"), NULL,
                     "tests/fixtures/ref-qwen35-c.mtp.bin", 1e-4);
    check_mtp_logits(convert_to("tests/fixtures/hf-qwen35-b", NX_TYPE_F16, NX_CONVERT_MTP_EMBED, "mb16.gguf"), NULL,
                     "tests/fixtures/ref-qwen35-b.mtp.bin", 0.1);
    /* --no-mtp trunk + --mtp head file == the single file */
    const char *trunk = convert_to("tests/fixtures/hf-qwen35-a", NX_TYPE_F32, NX_CONVERT_MTP_DROP, "st32.gguf");
    const char *head = convert_to("tests/fixtures/hf-qwen35-a", NX_TYPE_F32, NX_CONVERT_MTP_ONLY, "sm32.gguf");
    check_mtp_logits(trunk, head, "tests/fixtures/ref-qwen35-a.mtp.bin", 1e-4);
}

static void test_logits_a_f32(void **s) {
    (void)s;
    check_logits(convert_to("tests/fixtures/hf-qwen35-a", NX_TYPE_F32, NX_CONVERT_MTP_EMBED, "a32.gguf"),
                 "tests/fixtures/ref-qwen35-a.logits.bin", 1e-4);
}

static void test_logits_a_bf16(void **s) {
    (void)s; /* BF16 weights are the checkpoint's own; activations rounded for the BF16 dot */
    check_logits(convert_to("tests/fixtures/hf-qwen35-a", NX_TYPE_BF16, NX_CONVERT_MTP_DROP, "a16.gguf"),
                 "tests/fixtures/ref-qwen35-a.logits.bin", 0.25);
}

static void test_logits_b_f16(void **s) {
    (void)s; /* F16 source: llama.cpp adds the norm +1 in F16, the reference exactly: ~5e-2 */
    check_logits(convert_to("tests/fixtures/hf-qwen35-b", NX_TYPE_F16, NX_CONVERT_MTP_EMBED, "b16.gguf"),
                 "tests/fixtures/ref-qwen35-b.logits.bin", 0.1);
}

static uint32_t u32(const nx_gguf *g, const char *k);

/* ---- transformations, value by value ---------------------------------------------------- */

/* HF tensor by its Qwen3_5ForCausalLM name; Qwen3_5ForConditionalGeneration checkpoints (fixture c)
 * keep the text model under model.language_model. */
static const nx_st_tensor *hf_find(const nx_safetensors *st, const char *name) {
    const nx_st_tensor *t = nx_st_find(st, name);
    if (!t && !strncmp(name, "model.", 6)) {
        char vl[256];
        snprintf(vl, sizeof vl, "model.language_model.%s", name + 6);
        t = nx_st_find(st, vl);
    }
    return t;
}

static float *hf_f32(const nx_safetensors *st, const char *name, uint64_t *n) {
    const nx_st_tensor *t = hf_find(st, name);
    if (!t) fail_msg("fixture lacks %s", name);
    float *v = malloc(t->n_elems * sizeof *v);
    nx_err err;
    assert_true(nx_st_read_f32(t, 0, t->n_elems, v, &err));
    *n = t->n_elems;
    return v;
}

static const float *gg_f32(const nx_gguf *g, const char *name, uint64_t n) {
    const nx_gguf_tensor *t = nx_gguf_find_tensor(g, name);
    if (!t) fail_msg("gguf lacks %s", name);
    if (t->type != NX_TYPE_F32) fail_msg("%s: type %u, want F32", name, t->type);
    assert_int_equal(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3], n);
    return t->data;
}

/* HF grouped value head of tiled head h (k-heads Hk, r = Hv / Hk). */
static int grouped_of_tiled(int h, int Hk, int r) { return (h % Hk) * r + h / Hk; }

static void check_transforms(const char *fixture, int Hk, int Hv, int dv, int L) {
    const char *path = convert_to(fixture, NX_TYPE_F32, NX_CONVERT_MTP_EMBED, "tr.gguf");
    nx_gguf *g;
    nx_safetensors *st;
    nx_err err;
    assert_true(nx_gguf_open(&g, path, &err));
    char dir[512];
    snprintf(dir, sizeof dir, "%s", tu_src_path(fixture));
    if (!nx_st_open_dir(&st, dir, &err)) fail_msg("%s", err.msg);
    const int r = Hv / Hk, key_dim = Hk * dv, E = 64;
    uint64_t n;
    /* +1 norms (incl. q/k norms of attention layer 3 and all MTP norms), none on ssm_norm */
    static const char *const plus1[][2] = {
        {"model.norm.weight", "output_norm.weight"},
        {"model.layers.0.input_layernorm.weight", "blk.0.attn_norm.weight"},
        {"model.layers.2.post_attention_layernorm.weight", "blk.2.post_attention_norm.weight"},
        {"model.layers.3.self_attn.q_norm.weight", "blk.3.attn_q_norm.weight"},
        {"model.layers.3.self_attn.k_norm.weight", "blk.3.attn_k_norm.weight"},
        {"mtp.pre_fc_norm_embedding.weight", "blk.4.nextn.enorm.weight"},
        {"mtp.pre_fc_norm_hidden.weight", "blk.4.nextn.hnorm.weight"},
        {"mtp.norm.weight", "blk.4.nextn.shared_head_norm.weight"},
        {"mtp.layers.0.input_layernorm.weight", "blk.4.attn_norm.weight"},
        {"mtp.layers.0.self_attn.k_norm.weight", "blk.4.attn_k_norm.weight"},
    };
    bool f16_src = hf_find(st, "model.norm.weight")->dtype == NX_ST_F16;
    for (size_t i = 0; i < NX_ARRAY_LEN(plus1); i++) {
        float *h = hf_f32(st, plus1[i][0], &n);
        const float *q = gg_f32(g, plus1[i][1], n);
        for (uint64_t j = 0; j < n; j++) {
            float want = h[j] + 1.0f;
            if (f16_src) want = nx_f16_to_f32(nx_f32_to_f16(want)); /* llama.cpp adds in F16 */
            if (q[j] != want) fail_msg("%s[%llu] = %g, want %g", plus1[i][1], (unsigned long long)j, q[j], want);
        }
        free(h);
    }
    {
        float *h = hf_f32(st, "model.layers.1.linear_attn.norm.weight", &n);
        const float *q = gg_f32(g, "blk.1.ssm_norm.weight", n);
        assert_memory_equal(h, q, n * sizeof *h);
        free(h);
    }
    /* A_log -> -exp, and the element permutation of A_log / dt_bias */
    {
        float *a = hf_f32(st, "model.layers.0.linear_attn.A_log", &n);
        float *dt = hf_f32(st, "model.layers.0.linear_attn.dt_bias", &n);
        const float *sa = gg_f32(g, "blk.0.ssm_a", (uint64_t)Hv), *sd = gg_f32(g, "blk.0.ssm_dt.bias", (uint64_t)Hv);
        for (int h = 0; h < Hv; h++) {
            int src = grouped_of_tiled(h, Hk, r);
            float want = -expf(a[src]);
            if (f16_src && hf_find(st, "model.layers.0.linear_attn.A_log")->dtype == NX_ST_F16)
                want = nx_f16_to_f32(nx_f32_to_f16(want));
            assert_true(fabsf(sa[h] - want) <= 1e-6f * fabsf(want));
            assert_true(sa[h] < 0);
            assert_true(sd[h] == dt[src]);
        }
        free(a);
        free(dt);
    }
    /* qkv: Q/K rows untouched, V rows permuted by head; z, a, b rows; conv1d V channels; out_proj cols */
    {
        float *h = hf_f32(st, "model.layers.2.linear_attn.in_proj_qkv.weight", &n);
        const float *q = gg_f32(g, "blk.2.attn_qkv.weight", n);
        int rows = (int)(n / E);
        for (int row = 0; row < rows; row++) {
            int src = row;
            if (row >= 2 * key_dim) {
                int rel = row - 2 * key_dim, head = rel / dv;
                src = 2 * key_dim + grouped_of_tiled(head, Hk, r) * dv + rel % dv;
            }
            assert_memory_equal(q + (size_t)row * E, h + (size_t)src * E, E * sizeof *h);
        }
        free(h);
        h = hf_f32(st, "model.layers.2.linear_attn.in_proj_z.weight", &n);
        q = gg_f32(g, "blk.2.attn_gate.weight", n);
        for (int row = 0; row < Hv * dv; row++) {
            int src = grouped_of_tiled(row / dv, Hk, r) * dv + row % dv;
            assert_memory_equal(q + (size_t)row * E, h + (size_t)src * E, E * sizeof *h);
        }
        free(h);
        h = hf_f32(st, "model.layers.2.linear_attn.in_proj_a.weight", &n);
        q = gg_f32(g, "blk.2.ssm_alpha.weight", n);
        for (int row = 0; row < Hv; row++)
            assert_memory_equal(q + (size_t)row * E, h + (size_t)grouped_of_tiled(row, Hk, r) * E, E * sizeof *h);
        free(h);
        h = hf_f32(st, "model.layers.2.linear_attn.in_proj_b.weight", &n);
        q = gg_f32(g, "blk.2.ssm_beta.weight", n);
        for (int row = 0; row < Hv; row++)
            assert_memory_equal(q + (size_t)row * E, h + (size_t)grouped_of_tiled(row, Hk, r) * E, E * sizeof *h);
        free(h);
        h = hf_f32(st, "model.layers.2.linear_attn.conv1d.weight", &n);
        const nx_gguf_tensor *ct = nx_gguf_find_tensor(g, "blk.2.ssm_conv1d.weight");
        assert_int_equal(ct->n_dims, 2);
        assert_int_equal(ct->ne[0], 4);
        assert_int_equal(ct->ne[1], 2 * key_dim + Hv * dv);
        q = gg_f32(g, "blk.2.ssm_conv1d.weight", n);
        for (int ch = 0; ch < 2 * key_dim + Hv * dv; ch++) {
            int src = ch < 2 * key_dim ? ch
                                       : 2 * key_dim + grouped_of_tiled((ch - 2 * key_dim) / dv, Hk, r) * dv +
                                             (ch - 2 * key_dim) % dv;
            assert_memory_equal(q + (size_t)ch * 4, h + (size_t)src * 4, 4 * sizeof *h);
        }
        free(h);
        h = hf_f32(st, "model.layers.2.linear_attn.out_proj.weight", &n);
        q = gg_f32(g, "blk.2.ssm_out.weight", n);
        for (int row = 0; row < E; row++)
            for (int c = 0; c < Hv * dv; c++) {
                int src = grouped_of_tiled(c / dv, Hk, r) * dv + c % dv;
                assert_true(q[(size_t)row * Hv * dv + c] == h[(size_t)row * Hv * dv + src]);
            }
        free(h);
    }
    /* untouched matrices: attention q (q+gate interleaving is the HF layout, kept as is) */
    {
        float *h = hf_f32(st, "model.layers.3.self_attn.q_proj.weight", &n);
        assert_memory_equal(gg_f32(g, "blk.3.attn_q.weight", n), h, n * sizeof *h);
        free(h);
        h = hf_f32(st, "mtp.fc.weight", &n);
        const nx_gguf_tensor *t = nx_gguf_find_tensor(g, "blk.4.nextn.eh_proj.weight");
        assert_int_equal(t->ne[0], 2 * E);
        assert_int_equal(t->ne[1], E);
        assert_memory_equal(gg_f32(g, "blk.4.nextn.eh_proj.weight", n), h, n * sizeof *h);
        free(h);
    }
    (void)L;
    nx_st_close(st);
    nx_gguf_close(g);
}

static void test_transforms_a(void **s) { (void)s; check_transforms("tests/fixtures/hf-qwen35-a", 2, 4, 16, 4); }
static void test_transforms_b(void **s) { (void)s; check_transforms("tests/fixtures/hf-qwen35-b", 2, 6, 16, 4); }
static void test_transforms_c(void **s) { (void)s; check_transforms("tests/fixtures/hf-qwen35-c", 1, 4, 16, 4); }

/* c: Qwen3_5ForConditionalGeneration layout (nested text_config, model.language_model.*), one key
 * head for four value heads, template in chat_template.jinja. */
static void test_logits_c_f32(void **s) {
    (void)s;
    const char *path = convert_to("tests/fixtures/hf-qwen35-c", NX_TYPE_F32, NX_CONVERT_MTP_EMBED, "c32.gguf");
    check_logits(path, "tests/fixtures/ref-qwen35-c.logits.bin", 1e-4);
    nx_gguf *g;
    nx_err err;
    assert_true(nx_gguf_open(&g, path, &err));
    nx_str tmpl;
    assert_true(nx_gguf_get_str(g, "tokenizer.chat_template", &tmpl, &err));
    size_t len;
    char *want = tu_read_file(tu_src_path("tests/fixtures/hf-qwen35-c/chat_template.jinja"), &len);
    assert_non_null(want);
    assert_int_equal(tmpl.len, len);
    assert_memory_equal(tmpl.ptr, want, len);
    free(want);
    assert_int_equal(u32(g, "qwen35.ssm.group_count"), 1);
    assert_int_equal(u32(g, "qwen35.block_count"), 5);
    nx_gguf_close(g);
}

/* ---- keys, vocabulary, types ------------------------------------------------------------- */

static uint32_t u32(const nx_gguf *g, const char *k) {
    uint32_t v;
    nx_err err;
    if (!nx_gguf_get_u32(g, k, &v, &err)) fail_msg("%s", err.msg);
    return v;
}

static void test_keys_and_types(void **s) {
    (void)s;
    const char *path = convert_to("tests/fixtures/hf-qwen35-a", NX_TYPE_F16, NX_CONVERT_MTP_EMBED, "keys.gguf");
    nx_gguf *g;
    nx_err err;
    assert_true(nx_gguf_open(&g, path, &err));
    nx_str str;
    assert_true(nx_gguf_get_str(g, "general.architecture", &str, &err));
    assert_true(nx_str_eq(str, "qwen35"));
    assert_int_equal(u32(g, "qwen35.block_count"), 5);
    assert_int_equal(u32(g, "qwen35.nextn_predict_layers"), 1);
    assert_int_equal(u32(g, "qwen35.embedding_length"), 64);
    assert_int_equal(u32(g, "qwen35.feed_forward_length"), 128);
    assert_int_equal(u32(g, "qwen35.context_length"), 4096);
    assert_int_equal(u32(g, "qwen35.attention.head_count"), 4);
    assert_int_equal(u32(g, "qwen35.attention.head_count_kv"), 2);
    assert_int_equal(u32(g, "qwen35.attention.key_length"), 32);
    assert_int_equal(u32(g, "qwen35.attention.value_length"), 32);
    assert_int_equal(u32(g, "qwen35.rope.dimension_count"), 8);
    assert_int_equal(u32(g, "qwen35.ssm.conv_kernel"), 4);
    assert_int_equal(u32(g, "qwen35.ssm.state_size"), 16);
    assert_int_equal(u32(g, "qwen35.ssm.group_count"), 2);
    assert_int_equal(u32(g, "qwen35.ssm.time_step_rank"), 4);
    assert_int_equal(u32(g, "qwen35.ssm.inner_size"), 64);
    assert_int_equal(u32(g, "qwen35.full_attention_interval"), 4);
    assert_int_equal(u32(g, "general.file_type"), 1);
    assert_int_equal(u32(g, "general.quantization_version"), 2);
    float f;
    assert_true(nx_gguf_get_f32(g, "qwen35.rope.freq_base", &f, &err));
    assert_true(f == 1e7f);
    assert_true(nx_gguf_get_f32(g, "qwen35.attention.layer_norm_rms_epsilon", &f, &err));
    assert_true(f == 1e-6f);
    const nx_gguf_kv *arr;
    assert_true(nx_gguf_get_arr(g, "qwen35.rope.dimension_sections", NX_GGUF_INT32, &arr, &err));
    assert_int_equal(arr->arr_count, 4);
    assert_int_equal(nx_gguf_arr_int(arr, 0), 2);
    assert_int_equal(nx_gguf_arr_int(arr, 1), 1);
    assert_int_equal(nx_gguf_arr_int(arr, 2), 1);
    assert_int_equal(nx_gguf_arr_int(arr, 3), 0);
    /* vocabulary: 296 BPE tokens + 5 added, padded to vocab_size 320 with [PAD<i>] (type 5) */
    assert_true(nx_gguf_get_arr(g, "tokenizer.ggml.tokens", NX_GGUF_STRING, &arr, &err));
    assert_int_equal(arr->arr_count, 320);
    assert_true(nx_str_eq(nx_gguf_arr_str(arr, 298), "<|im_end|>"));
    assert_true(nx_str_eq(nx_gguf_arr_str(arr, 301), "[PAD301]"));
    assert_true(nx_str_eq(nx_gguf_arr_str(arr, 319), "[PAD319]"));
    assert_true(nx_gguf_get_arr(g, "tokenizer.ggml.token_type", NX_GGUF_INT32, &arr, &err));
    assert_int_equal(nx_gguf_arr_int(arr, 0), 1);
    assert_int_equal(nx_gguf_arr_int(arr, 298), 3);
    assert_int_equal(nx_gguf_arr_int(arr, 299), 4); /* <think>: added, not special */
    assert_int_equal(nx_gguf_arr_int(arr, 319), 5);
    assert_int_equal(u32(g, "tokenizer.ggml.eos_token_id"), 298);
    assert_int_equal(u32(g, "tokenizer.ggml.padding_token_id"), 296);
    assert_true(nx_gguf_get_str(g, "tokenizer.ggml.pre", &str, &err));
    assert_true(nx_str_eq(str, "qwen35"));
    /* types: norms, 1-D and conv F32; matrices F16 */
    static const struct { const char *name; uint32_t type; } types[] = {
        {"token_embd.weight", NX_TYPE_F16}, {"output.weight", NX_TYPE_F16}, {"output_norm.weight", NX_TYPE_F32},
        {"blk.0.attn_qkv.weight", NX_TYPE_F16}, {"blk.0.ssm_conv1d.weight", NX_TYPE_F32},
        {"blk.0.ssm_a", NX_TYPE_F32}, {"blk.0.ssm_dt.bias", NX_TYPE_F32}, {"blk.0.ssm_norm.weight", NX_TYPE_F32},
        {"blk.0.ssm_alpha.weight", NX_TYPE_F16}, {"blk.3.attn_q_norm.weight", NX_TYPE_F32},
        {"blk.4.nextn.eh_proj.weight", NX_TYPE_F16}, {"blk.4.nextn.enorm.weight", NX_TYPE_F32},
    };
    for (size_t i = 0; i < NX_ARRAY_LEN(types); i++) {
        const nx_gguf_tensor *t = nx_gguf_find_tensor(g, types[i].name);
        if (!t) fail_msg("missing %s", types[i].name);
        if (t->type != types[i].type) fail_msg("%s: type %u, want %u", types[i].name, t->type, types[i].type);
    }
    /* 71 HF tensors, all mapped; no lm_head in the tied fixture b */
    assert_int_equal(g->n_tensors, 71);
    nx_gguf_close(g);
    path = convert_to("tests/fixtures/hf-qwen35-b", NX_TYPE_F16, NX_CONVERT_MTP_EMBED, "keysb.gguf");
    assert_true(nx_gguf_open(&g, path, &err));
    assert_null(nx_gguf_find_tensor(g, "output.weight"));
    assert_int_equal(g->n_tensors, 70);
    nx_gguf_close(g);
}

/* Q8_0 output == the reference quantiser applied to the F32 conversion of the same tensor. */
static void test_q8_0_matches_quantiser(void **s) {
    (void)s;
    nx_gguf *g32, *g8;
    nx_err err;
    assert_true(nx_gguf_open(&g32, convert_to("tests/fixtures/hf-qwen35-a", NX_TYPE_F32, NX_CONVERT_MTP_EMBED, "q32"), &err));
    assert_true(nx_gguf_open(&g8, convert_to("tests/fixtures/hf-qwen35-a", NX_TYPE_Q8_0, NX_CONVERT_MTP_EMBED, "q8"), &err));
    assert_int_equal(g32->n_tensors, g8->n_tensors);
    const nx_type_traits *tr = nx_type_get(NX_TYPE_Q8_0);
    int n_q8 = 0;
    for (uint64_t i = 0; i < g32->n_tensors; i++) {
        const nx_gguf_tensor *a = &g32->tensors[i], *b = &g8->tensors[i];
        assert_true(a->name.len == b->name.len && !memcmp(a->name.ptr, b->name.ptr, a->name.len));
        if (b->type == NX_TYPE_F32) {
            assert_int_equal(a->nbytes, b->nbytes);
            assert_memory_equal(a->data, b->data, a->nbytes);
            continue;
        }
        assert_int_equal(b->type, NX_TYPE_Q8_0);
        uint64_t n = a->ne[0] * a->ne[1];
        void *want = malloc(b->nbytes);
        tr->from_float(a->data, want, (int64_t)n);
        assert_memory_equal(want, b->data, b->nbytes);
        free(want);
        n_q8++;
    }
    assert_true(n_q8 > 30);
    nx_gguf_close(g32);
    nx_gguf_close(g8);
}

/* --mtp and --no-mtp together: exactly the single file's tensors, byte for byte; and the
 * trunk-only file gives the same logits. */
static void test_mtp_split(void **s) {
    (void)s;
    nx_gguf *full, *trunk, *mtp;
    nx_err err;
    assert_true(nx_gguf_open(&full, convert_to("tests/fixtures/hf-qwen35-a", NX_TYPE_F16, NX_CONVERT_MTP_EMBED, "full"), &err));
    const char *tp = convert_to("tests/fixtures/hf-qwen35-a", NX_TYPE_F16, NX_CONVERT_MTP_DROP, "trunk");
    assert_true(nx_gguf_open(&trunk, tp, &err));
    assert_true(nx_gguf_open(&mtp, convert_to("tests/fixtures/hf-qwen35-a", NX_TYPE_F16, NX_CONVERT_MTP_ONLY, "mtp"), &err));
    assert_int_equal(u32(trunk, "qwen35.block_count"), 4);
    assert_null(nx_gguf_find_kv(trunk, "qwen35.nextn_predict_layers"));
    assert_int_equal(u32(mtp, "qwen35.block_count"), 5);
    assert_int_equal(u32(mtp, "qwen35.nextn_predict_layers"), 1);
    assert_null(nx_gguf_find_tensor(mtp, "blk.0.attn_norm.weight")); /* how llama.cpp detects an mtp-only file */
    for (uint64_t i = 0; i < full->n_tensors; i++) {
        const nx_gguf_tensor *t = &full->tensors[i];
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        bool is_mtp = !strncmp(name, "blk.4.", 6);
        bool shared = !strcmp(name, "token_embd.weight") || !strcmp(name, "output_norm.weight") ||
                      !strcmp(name, "output.weight");
        const nx_gguf_tensor *a = nx_gguf_find_tensor(trunk, name), *b = nx_gguf_find_tensor(mtp, name);
        if (is_mtp) assert_null(a); else assert_non_null(a);
        if (is_mtp || shared) assert_non_null(b); else assert_null(b);
        const nx_gguf_tensor *c = a ? a : b;
        assert_int_equal(c->type, t->type);
        assert_int_equal(c->nbytes, t->nbytes);
        assert_memory_equal(c->data, t->data, t->nbytes);
    }
    assert_int_equal(trunk->n_tensors + mtp->n_tensors, full->n_tensors + 3);
    nx_gguf_close(full);
    nx_gguf_close(trunk);
    nx_gguf_close(mtp);
    check_logits(tp, "tests/fixtures/ref-qwen35-a.logits.bin", 0.25);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_logits_a_f32),
        cmocka_unit_test(test_logits_a_bf16),
        cmocka_unit_test(test_logits_b_f16),
        cmocka_unit_test(test_transforms_a),
        cmocka_unit_test(test_transforms_b),
        cmocka_unit_test(test_transforms_c),
        cmocka_unit_test(test_logits_c_f32),
        cmocka_unit_test(test_keys_and_types),
        cmocka_unit_test(test_q8_0_matches_quantiser),
        cmocka_unit_test(test_mtp_split),
        cmocka_unit_test(test_mtp_logits),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    for (int i = 0; i < n_outputs; i++) remove(outputs[i]);
    return rc;
}
