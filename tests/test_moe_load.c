/* test_moe_load.c - loading qwen35moe files: the real 35B-A3B / 122B-A10B shapes of the mkmodel
 * presets against the published counts (tensor counts of the real GGUF, parameter counts derived
 * from the configs), the expert views of the stacked and the fused gate/up layouts against the
 * values mkmodel wrote, llama.cpp's width fallbacks, and clear errors for inconsistent counts,
 * shapes and keys. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert/mkmodel.h"
#include "gguf/gguf.h"
#include "quant/quant.h"

static nx_pool *pool;
static char stacked_path[512], fused_path[512];

static int setup(void **state) {
    (void)state;
    nx_err err;
    pool = nx_pool_create(2, &err);
    snprintf(stacked_path, sizeof stacked_path, "%s", tu_tmp_path("moe.gguf"));
    snprintf(fused_path, sizeof fused_path, "%s", tu_tmp_path("moe-fused.gguf"));
    nx_mk_options o = {.preset = "tiny-moe", .type = NX_TYPE_F32, .seed = 3, .mtp = true, .tie = -1};
    if (!nx_mkmodel_write(&o, stacked_path, pool, &err)) fail_msg("%s", err.msg);
    o.fuse_gate_up = true;
    if (!nx_mkmodel_write(&o, fused_path, pool, &err)) fail_msg("%s", err.msg);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    remove(stacked_path);
    remove(fused_path);
    nx_pool_free(pool);
    return 0;
}

/* Tensor list facts of a preset. */
typedef struct counts {
    int tensors, f32;
    double params, mtp_params, routed;
} counts;

static counts count_preset(const char *preset, bool mtp, uint32_t vocab) {
    nx_err err;
    nx_mk_options o = {.preset = preset, .type = NX_TYPE_Q4_K, .seed = 1, .mtp = mtp, .n_vocab = vocab, .tie = -1};
    nx_hparams hp;
    bool tied;
    if (!nx_mk_hparams(&o, &hp, &tied, &err)) fail_msg("%s: %s", preset, err.msg);
    nx_mk_tensor *ts;
    int n = nx_mk_tensors(&hp, tied, false, &ts, &err);
    assert_true(n > 0);
    counts c = {.tensors = n};
    char mtp_pfx[32];
    snprintf(mtp_pfx, sizeof mtp_pfx, "blk.%u.", hp.n_layer);
    for (int i = 0; i < n; i++) {
        double p = (double)ts[i].ne[0] * (double)ts[i].ne[1] * (double)ts[i].ne[2];
        c.f32 += ts[i].keep_f32;
        if (mtp && !strncmp(ts[i].name, mtp_pfx, strlen(mtp_pfx))) {
            c.mtp_params += p;
            continue;
        }
        c.params += p;
        if (strstr(ts[i].name, "_exps.")) c.routed += p;
        /* every matrix row must take K-quants */
        if (!ts[i].keep_f32) assert_int_equal(ts[i].ne[0] % 256, 0);
    }
    free(ts);
    return c;
}

/* Real shapes: the GGUF of Qwen3.5-35B-A3B without MTP has 733 tensors, 301 of them F32
 * (observed in published files); text parameters without MTP 34.661 B, of which 3.455 B active,
 * MTP block 844.6 M; 122B-A10B: 122.112 B, 9.771 B active, MTP 2523.7 M (derived from the
 * published Hugging Face configs, with the real vocabulary of 248320). */
static void test_presets_have_real_shapes(void **state) {
    (void)state;
    static const struct {
        const char *name;
        int tensors, f32;
        double params, active, mtp;
        uint32_t E, L, H, Hv, n_exp, k, F_exp, F_sh;
    } want[] = {
        {"35b-a3b", 733, 301, 34.661e9, 3.455e9, 844.6e6, 2048, 40, 16, 32, 256, 8, 512, 512},
        {"122b-a10b", 3 + 36 * 19 + 12 * 16, 1 + 36 * 8 + 12 * 6, 122.112e9, 9.771e9, 2523.7e6, 3072, 48, 32, 64, 256, 8,
         1024, 1024},
    };
    nx_err err;
    for (size_t i = 0; i < NX_ARRAY_LEN(want); i++) {
        counts c = count_preset(want[i].name, false, 248320);
        assert_int_equal(c.tensors, want[i].tensors);
        assert_int_equal(c.f32, want[i].f32);
        double active = c.params - c.routed * (1.0 - (double)want[i].k / (double)want[i].n_exp);
        print_message("%s: %.4f B parameters, %.4f B active\n", want[i].name, c.params / 1e9, active / 1e9);
        assert_true(fabs(c.params - want[i].params) < 0.0006e9);
        assert_true(fabs(active - want[i].active) < 0.0006e9);
        counts m = count_preset(want[i].name, true, 248320);
        assert_true(fabs(m.mtp_params - want[i].mtp) < 0.06e6);
        assert_true(m.params == c.params);

        nx_mk_options o = {.preset = want[i].name, .type = NX_TYPE_Q4_K, .seed = 1, .mtp = true, .tie = -1};
        nx_hparams hp;
        bool tied;
        assert_true(nx_mk_hparams(&o, &hp, &tied, &err));
        assert_true(hp.moe && !tied);
        assert_int_equal(hp.n_embd, want[i].E);
        assert_int_equal(hp.n_layer, want[i].L);
        assert_int_equal(hp.n_head, want[i].H);
        assert_int_equal(hp.n_head_kv, 2);
        assert_int_equal(hp.ssm_dt_rank, want[i].Hv);
        assert_int_equal(hp.ssm_n_group, 16);
        assert_int_equal(hp.n_expert, want[i].n_exp);
        assert_int_equal(hp.n_expert_used, want[i].k);
        assert_int_equal(hp.n_ff_exp, want[i].F_exp);
        assert_int_equal(hp.n_ff_shexp, want[i].F_sh);
        assert_int_equal(hp.n_ff, 0); /* MoE configs have no intermediate_size: no feed_forward_length */
        /* --layers keeps widths and the layer-type rule */
        o.n_layers = 10;
        assert_true(nx_mk_hparams(&o, &hp, &tied, &err));
        assert_int_equal(hp.n_layer, 10);
        assert_int_equal(hp.n_layer_all, 11);
        assert_int_equal(hp.n_embd, want[i].E);
        assert_true(hp.recurrent[0] && !hp.recurrent[3] && !hp.recurrent[7] && hp.recurrent[9] && !hp.recurrent[10]);
        o.n_layers = want[i].L + 1;
        assert_false(nx_mk_hparams(&o, &hp, &tied, &err));
        assert_non_null(strstr(err.msg, "layers"));
    }
    nx_mk_options dense = {.preset = "tiny", .type = NX_TYPE_F32, .seed = 1, .tie = -1, .fuse_gate_up = true};
    nx_hparams hp;
    bool tied;
    assert_false(nx_mk_hparams(&dense, &hp, &tied, &err));
    assert_non_null(strstr(err.msg, "dense"));
}

/* Row `row` of the tensor `name` as mkmodel generated it (F32 presets: the file holds exactly these). */
static void mk_row(const nx_hparams *hp, const char *name, int64_t row, float *out) {
    nx_err err;
    nx_mk_tensor *ts;
    int n = nx_mk_tensors(hp, false, strstr(name, "gate_up") != NULL, &ts, &err);
    assert_true(n > 0);
    for (int i = 0; i < n; i++)
        if (!strcmp(ts[i].name, name)) {
            nx_mk_fill_rows(&ts[i], hp, 3, row, 1, out);
            free(ts);
            return;
        }
    fail_msg("no tensor %s", name);
}

static void expect_row(const nx_weight *w, size_t stride, int e, int64_t r, const float *want) {
    nx_weight x = nx_moe_expert(w, stride, e);
    assert_int_equal(x.type, NX_TYPE_F32);
    assert_memory_equal((const char *)x.data + (size_t)r * x.row_bytes, want, (size_t)x.in * sizeof(float));
}

/* The expert views of both layouts select the rows llama.cpp reads: expert e of a stacked
 * {in, out, n_expert} tensor is rows [e * out, (e + 1) * out); in the fused gate_up tensor expert
 * e's gate rows are [2e * F, 2e * F + F) and its up rows the next F. */
static void test_expert_views(void **state) {
    (void)state;
    nx_err err;
    float want[512];
    for (int fused = 0; fused < 2; fused++) {
        nx_model *m;
        if (!nx_model_load(&m, fused ? fused_path : stacked_path, true, &err)) fail_msg("%s", err.msg);
        const nx_hparams *hp = &m->hp;
        assert_true(hp->moe);
        assert_int_equal(hp->n_expert, 8);
        assert_int_equal(hp->n_expert_used, 2);
        assert_int_equal(hp->n_ff_exp, 256);
        assert_int_equal(hp->n_ff_shexp, 512);
        assert_int_equal(hp->n_layer, 4);
        assert_true(m->mtp.present && m->mtp.layer.is_moe);
        const int F = 256;
        for (uint32_t li = 0; li <= hp->n_layer; li++) {
            const nx_layer *l = li < hp->n_layer ? &m->layers[li] : &m->mtp.layer;
            const nx_moe_weights *w = &l->moe;
            assert_true(l->is_moe);
            assert_int_equal(w->fused_gate_up, fused);
            assert_int_equal(w->gate.in, 256);
            assert_int_equal(w->gate.out, F);
            assert_int_equal(w->down.in, F);
            assert_int_equal(w->down.out, 256);
            assert_int_equal(w->router.out, 8);
            assert_int_equal(w->sh_gate_inp.in, 256);
            assert_int_equal(w->sh_gate_inp.out, 1);
            assert_int_equal(w->sh_up.out, 512);
            char name[96];
            for (int e = 0; e < 8; e += 7)
                for (int64_t r = 0; r < F; r += F - 1) {
                    if (fused) {
                        snprintf(name, sizeof name, "blk.%u.ffn_gate_up_exps.weight", li);
                        mk_row(hp, name, 2 * e * F + r, want);
                        expect_row(&w->gate, w->gate_stride, e, r, want);
                        mk_row(hp, name, 2 * e * F + F + r, want);
                        expect_row(&w->up, w->up_stride, e, r, want);
                    } else {
                        snprintf(name, sizeof name, "blk.%u.ffn_gate_exps.weight", li);
                        mk_row(hp, name, e * F + r, want);
                        expect_row(&w->gate, w->gate_stride, e, r, want);
                        snprintf(name, sizeof name, "blk.%u.ffn_up_exps.weight", li);
                        mk_row(hp, name, e * F + r, want);
                        expect_row(&w->up, w->up_stride, e, r, want);
                    }
                    snprintf(name, sizeof name, "blk.%u.ffn_down_exps.weight", li);
                    mk_row(hp, name, e * 256 + r, want);
                    expect_row(&w->down, w->down_stride, e, r, want);
                }
        }
        /* bytes: routed experts of the 4 trunk layers, 3 stacks of 8 x 256 x 256 F32 each */
        assert_int_equal(m->expert_bytes, 4ull * 3 * 8 * 256 * 256 * 4);
        assert_int_equal(nx_model_active_bytes(m), m->weight_bytes - m->expert_bytes / 4 * 3);
        nx_model_free(m);
    }
}

/* ---- broken files: rewrite the stacked file with edits -------------------------------------- */

typedef struct edit {
    const char *drop_key;
    const char *u32_key;     /* replaced, or added when absent */
    uint32_t u32_val;
    const char *u32_key2;
    uint32_t u32_val2;
    const char *drop_tensor;
    const char *transpose_tensor;
    const char *dup_tensor, *dup_as; /* an extra copy of a tensor under another name */
} edit;

static const char *rewrite(const edit *e) {
    static char out[512];
    snprintf(out, sizeof out, "%s", tu_tmp_path("edit.gguf"));
    nx_err err;
    nx_gguf *g;
    if (!nx_gguf_open(&g, stacked_path, &err)) fail_msg("%s", err.msg);
    nx_gguf_writer *w = nx_gguf_writer_new(&err);
    assert_non_null(w);
    bool put1 = false, put2 = false;
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const nx_gguf_kv *kv = &g->kv[i];
        if (nx_str_eq(kv->key, "general.alignment")) continue;
        if (e->drop_key && nx_str_eq(kv->key, e->drop_key)) continue;
        bool ok;
        if (e->u32_key && nx_str_eq(kv->key, e->u32_key)) ok = nx_gguf_add_u32(w, e->u32_key, e->u32_val, &err), put1 = true;
        else if (e->u32_key2 && nx_str_eq(kv->key, e->u32_key2))
            ok = nx_gguf_add_u32(w, e->u32_key2, e->u32_val2, &err), put2 = true;
        else ok = nx_gguf_add_kv_copy(w, kv, &err);
        if (!ok) fail_msg("%s", err.msg);
    }
    if (e->u32_key && !put1 && !nx_gguf_add_u32(w, e->u32_key, e->u32_val, &err)) fail_msg("%s", err.msg);
    if (e->u32_key2 && !put2 && !nx_gguf_add_u32(w, e->u32_key2, e->u32_val2, &err)) fail_msg("%s", err.msg);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const nx_gguf_tensor *t = &g->tensors[i];
        if (e->drop_tensor && nx_str_eq(t->name, e->drop_tensor)) continue;
        uint64_t ne[4] = {t->ne[0], t->ne[1], t->ne[2], t->ne[3]};
        if (e->transpose_tensor && nx_str_eq(t->name, e->transpose_tensor)) {
            ne[0] = t->ne[1];
            ne[1] = t->ne[0];
        }
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        if (!nx_gguf_add_tensor(w, name, t->type, t->n_dims, ne, t->data, &err)) fail_msg("%s", err.msg);
        if (e->dup_tensor && !strcmp(name, e->dup_tensor) &&
            !nx_gguf_add_tensor(w, e->dup_as, t->type, t->n_dims, ne, t->data, &err))
            fail_msg("%s", err.msg);
    }
    if (!nx_gguf_writer_write(w, out, &err)) fail_msg("%s", err.msg);
    nx_gguf_writer_free(w);
    nx_gguf_close(g);
    return out;
}

static void expect_load_error(const edit *e, const char *needle) {
    const char *p = rewrite(e);
    nx_err err;
    nx_model *m = NULL;
    if (nx_model_load(&m, p, true, &err)) {
        nx_model_free(m);
        fail_msg("load succeeded, expected an error containing \"%s\"", needle);
    }
    if (!strstr(err.msg, needle)) fail_msg("error \"%s\" lacks \"%s\"", err.msg, needle);
    assert_non_null(strstr(err.msg, p)); /* names the file */
    remove(p);
}

static nx_model *load_edited(const edit *e) {
    const char *p = rewrite(e);
    nx_err err;
    nx_model *m = NULL;
    if (!nx_model_load(&m, p, true, &err)) fail_msg("%s", err.msg);
    remove(p);
    return m;
}

static void test_bad_counts_and_keys(void **state) {
    (void)state;
    edit e1 = {.drop_key = "qwen35moe.expert_count"};
    expect_load_error(&e1, "qwen35moe.expert_count = 0");
    edit e2 = {.u32_key = "qwen35moe.expert_used_count", .u32_val = 9};
    expect_load_error(&e2, "expert_used_count = 9 must be in 1..expert_count (8)");
    edit e3 = {.u32_key = "qwen35moe.expert_used_count", .u32_val = 0};
    expect_load_error(&e3, "expert_used_count = 0");
    edit e4 = {.u32_key = "qwen35moe.expert_count", .u32_val = 1000};
    expect_load_error(&e4, "expert_count = 1000 (must be 1..512)");
    /* a count that disagrees with the tensors */
    edit e5 = {.u32_key = "qwen35moe.expert_count", .u32_val = 4};
    expect_load_error(&e5, "tensor 'blk.0.ffn_gate_inp.weight' has shape {256, 8}, expected {256, 4}");
    edit e6 = {.u32_key = "qwen35moe.expert_feed_forward_length", .u32_val = 128};
    expect_load_error(&e6, "tensor 'blk.0.ffn_gate_exps.weight' has shape {256, 256, 8}, expected {256, 128, 8}");
    edit e7 = {.u32_key = "qwen35moe.expert_group_count", .u32_val = 2};
    expect_load_error(&e7, "grouped expert routing is not supported");
    /* no width keys and no feed_forward_length: nothing to fall back to */
    edit e8 = {.drop_key = "qwen35moe.expert_feed_forward_length"};
    expect_load_error(&e8, "expert width 0");
}

/* llama.cpp's fallbacks: n_ff_exp = feed_forward_length / expert_used_count, n_ff_shexp =
 * feed_forward_length, when their keys are absent. */
static void test_width_fallbacks(void **state) {
    (void)state;
    edit e = {.drop_key = "qwen35moe.expert_feed_forward_length", .u32_key = "qwen35moe.feed_forward_length",
              .u32_val = 512};
    nx_model *m = load_edited(&e);
    assert_int_equal(m->hp.n_ff_exp, 256);
    assert_int_equal(m->hp.n_ff_shexp, 512);
    nx_model_free(m);
    edit e2 = {.drop_key = "qwen35moe.expert_shared_feed_forward_length", .u32_key = "qwen35moe.feed_forward_length",
               .u32_val = 512};
    m = load_edited(&e2);
    assert_int_equal(m->hp.n_ff_exp, 256);
    assert_int_equal(m->hp.n_ff_shexp, 512);
    nx_model_free(m);
    /* a fallback that gives the wrong width is caught by the tensor shapes */
    edit e3 = {.drop_key = "qwen35moe.expert_shared_feed_forward_length",
               .u32_key = "qwen35moe.feed_forward_length", .u32_val = 256};
    expect_load_error(&e3, "tensor 'blk.0.ffn_gate_shexp.weight' has shape {256, 512}, expected {256, 256}");
}

static void test_bad_tensors(void **state) {
    (void)state;
    edit e1 = {.drop_tensor = "blk.2.ffn_down_exps.weight"};
    expect_load_error(&e1, "missing tensor 'blk.2.ffn_down_exps.weight'");
    edit e2 = {.drop_tensor = "blk.1.ffn_gate_inp_shexp.weight"};
    expect_load_error(&e2, "missing tensor 'blk.1.ffn_gate_inp_shexp.weight'");
    edit e3 = {.drop_tensor = "blk.4.ffn_up_exps.weight"}; /* the MTP block's */
    expect_load_error(&e3, "missing tensor 'blk.4.ffn_up_exps.weight'");
    edit e4 = {.transpose_tensor = "blk.3.ffn_up_shexp.weight"};
    expect_load_error(&e4, "tensor 'blk.3.ffn_up_shexp.weight' has shape {512, 256}, expected {256, 512}");
    edit e5 = {.drop_tensor = "blk.0.ffn_gate_inp.weight"};
    expect_load_error(&e5, "missing tensor 'blk.0.ffn_gate_inp.weight'");
    /* the fused and the stacked layout together (llama.cpp refuses such a file too) */
    edit e6 = {.dup_tensor = "blk.1.ffn_down_exps.weight", .dup_as = "blk.1.ffn_gate_up_exps.weight"};
    expect_load_error(&e6, "has shape {256, 256, 8}, expected {256, 512, 8}");
}

/* A file with the fused layout and a stray stacked tensor of the right shape. */
static void test_fused_and_stacked_exclude_each_other(void **state) {
    (void)state;
    nx_err err;
    nx_gguf *g;
    if (!nx_gguf_open(&g, fused_path, &err)) fail_msg("%s", err.msg);
    char out[512];
    snprintf(out, sizeof out, "%s", tu_tmp_path("both.gguf"));
    nx_gguf_writer *w = nx_gguf_writer_new(&err);
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (!nx_str_eq(g->kv[i].key, "general.alignment")) assert_true(nx_gguf_add_kv_copy(w, &g->kv[i], &err));
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const nx_gguf_tensor *t = &g->tensors[i];
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        assert_true(nx_gguf_add_tensor(w, name, t->type, t->n_dims, t->ne, t->data, &err));
        if (!strcmp(name, "blk.2.ffn_down_exps.weight"))
            assert_true(nx_gguf_add_tensor(w, "blk.2.ffn_up_exps.weight", t->type, t->n_dims, t->ne, t->data, &err));
    }
    assert_true(nx_gguf_writer_write(w, out, &err));
    nx_gguf_writer_free(w);
    nx_gguf_close(g);
    nx_model *m;
    assert_false(nx_model_load(&m, out, true, &err));
    assert_non_null(strstr(err.msg, "both 'blk.2.ffn_gate_up_exps.weight' and 'blk.2.ffn_up_exps.weight'"));
    remove(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_presets_have_real_shapes),
        cmocka_unit_test(test_expert_views),
        cmocka_unit_test(test_bad_counts_and_keys),
        cmocka_unit_test(test_width_fallbacks),
        cmocka_unit_test(test_bad_tensors),
        cmocka_unit_test(test_fused_and_stacked_exclude_each_other),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
