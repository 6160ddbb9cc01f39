/* test_convert_moe.c - Qwen3.5-MoE (qwen35moe) conversion.
 *
 * Fixtures (tests/fixtures/README.md), random-init checkpoints made by
 * tools/reference/make_checkpoint.py --moe:
 *   hf-qwen35moe-a: BF16, per-expert tensors (mlp.experts.X.{gate,up,down}_proj), 8 experts, top 2,
 *                   expert FFN 32, shared FFN 48, untied head, MTP block (MoE too), one file;
 *   hf-qwen35moe-b: F16, fused experts (mlp.experts.gate_up_proj / down_proj, transformers v5),
 *                   Qwen3_5MoeForConditionalGeneration layout, 6 experts, top 3, shared FFN 64,
 *                   tied head, MTP, 3 shards (experts of one layer spread over all three).
 * Checks:
 *   - byte identity with llama.cpp's converter: every file of tests/fixtures/llama-convert-moe.txt
 *     (both fixtures, f32 / f16 / bf16 / q8_0, --mtp, --no-mtp, --fuse-gate-up-exps) has
 *     llama.cpp's size and FNV-1a 64;
 *   - nextn's loader (src/model) accepts every layout the converter writes (per-expert and fused
 *     sources, --fuse-gate-up-exps, --no-mtp + --mtp) with config.json's expert counts and widths;
 *   - from the definitions, against the safetensors (independently of llama.cpp): expert x of
 *     ffn_{gate,up,down}_exps is the source expert's matrix (stacked or split from gate_up),
 *     ffn_gate_up_exps is gate then up per expert, the routers stay F32, the shared expert gate
 *     is {E, 1}, the MoE keys carry config.json's values, stacked tensors are written one expert
 *     at a time (the writer's part API) yet equal a whole-tensor conversion.
 */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert/convert.h"
#include "convert/safetensors.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "quant/quant.h"

static char outputs[32][512];
static int n_outputs;

static const char *convert(const char *fixture, uint32_t type, nx_convert_mtp mtp, bool fuse, const char *tag) {
    assert_true(n_outputs < 32);
    char *o = outputs[n_outputs++];
    snprintf(o, 512, "%s", tu_tmp_path(tag));
    char dir[512];
    snprintf(dir, sizeof dir, "%s", tu_src_path(fixture));
    nx_convert_opts opts = {.out_type = type, .mtp = mtp, .fuse_gate_up_exps = fuse};
    nx_err err;
    if (!nx_convert_hf(dir, o, &opts, &err)) fail_msg("convert %s: %s", fixture, err.msg);
    return o;
}

static uint64_t fnv1a64(const uint8_t *d, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ d[i]) * 0x100000001b3ull;
    return h;
}

static void test_llama_identical(void **s) {
    (void)s;
    size_t len;
    char *man = tu_read_file(tu_src_path("tests/fixtures/llama-convert-moe.txt"), &len);
    assert_non_null(man);
    int n = 0;
    for (char *line = man, *nl; (nl = strchr(line, '\n')); line = nl + 1) {
        *nl = 0;
        if (line[0] == '#' || !line[0]) continue;
        char fixture[64], type[16], option[32], hash[32];
        unsigned long long size;
        assert_int_equal(sscanf(line, "%63s %15s %31s %llu %31s", fixture, type, option, &size, hash), 5);
        nx_type t;
        assert_true(nx_type_from_name(type, &t));
        nx_convert_mtp mtp = !strcmp(option, "--mtp") ? NX_CONVERT_MTP_ONLY
                             : !strcmp(option, "--no-mtp") ? NX_CONVERT_MTP_DROP : NX_CONVERT_MTP_EMBED;
        bool fuse = !strcmp(option, "--fuse-gate-up-exps");
        assert_true(!strcmp(option, "-") || mtp != NX_CONVERT_MTP_EMBED || fuse);
        char rel[128];
        snprintf(rel, sizeof rel, "tests/fixtures/%s", fixture);
        const char *out = convert(rel, t, mtp, fuse, "llama-id.gguf");
        size_t got_len;
        uint8_t *got = tu_read_file(out, &got_len);
        assert_non_null(got);
        char got_hash[32];
        snprintf(got_hash, sizeof got_hash, "%016llx", (unsigned long long)fnv1a64(got, got_len));
        if (got_len != size || strcmp(got_hash, hash))
            fail_msg("%s %s %s: %zu bytes, fnv1a64 %s; llama.cpp's converter wrote %llu bytes, %s "
                     "(compare the two files with tools/reference/gguf_compare.py)", fixture, type, option, got_len,
                     got_hash, size, hash);
        free(got);
        remove(out);
        n++;
    }
    free(man);
    assert_int_equal(n, 14);
}

static const nx_gguf_tensor *tensor(const nx_gguf *g, const char *fmt, int layer) {
    char name[128];
    snprintf(name, sizeof name, fmt, layer);
    const nx_gguf_tensor *t = nx_gguf_find_tensor(g, name);
    if (!t) fail_msg("missing %s", name);
    return t;
}

/* Row r of expert x of a 3-D F32 GGUF tensor equals row `src_row` of the source tensor (whose
 * rows are ne0 long). */
static void expect_rows(const nx_gguf_tensor *t, uint64_t x, uint64_t r0, uint64_t n_rows, const nx_st_tensor *src,
                        uint64_t src_row0) {
    const uint64_t ne0 = t->ne[0];
    float *want = malloc(ne0 * sizeof *want);
    nx_err err;
    for (uint64_t r = 0; r < n_rows; r++) {
        if (!nx_st_read_f32(src, (src_row0 + r) * ne0, ne0, want, &err)) fail_msg("%s", err.msg);
        const float *got = (const float *)t->data + ((x * t->ne[1]) + r0 + r) * ne0;
        if (memcmp(got, want, ne0 * sizeof *want))
            fail_msg("%.*s expert %llu row %llu differs from %s row %llu", (int)t->name.len, t->name.ptr,
                     (unsigned long long)x, (unsigned long long)(r0 + r), src->name, (unsigned long long)(src_row0 + r));
    }
    free(want);
}

static uint32_t u32(const nx_gguf *g, const char *k) {
    uint32_t v;
    nx_err err;
    if (!nx_gguf_get_u32(g, k, &v, &err)) fail_msg("%s", err.msg);
    return v;
}

/* Per-expert fixture a: stacked tensors, expert by expert, for a trunk layer and the MTP block. */
static void test_stacked_a(void **s) {
    (void)s;
    nx_safetensors *st;
    nx_err err;
    assert_true(nx_st_open_dir(&st, tu_src_path("tests/fixtures/hf-qwen35moe-a"), &err));
    nx_gguf *g, *gf;
    assert_true(nx_gguf_open(&g, convert("tests/fixtures/hf-qwen35moe-a", NX_TYPE_F32, NX_CONVERT_MTP_EMBED, false,
                                         "a32.gguf"), &err));
    assert_true(nx_gguf_open(&gf, convert("tests/fixtures/hf-qwen35moe-a", NX_TYPE_F32, NX_CONVERT_MTP_EMBED, true,
                                          "a32f.gguf"), &err));
    static const int layers[] = {1, 3, 4};   /* GDN layer, attention layer, MTP block */
    for (size_t li = 0; li < NX_ARRAY_LEN(layers); li++) {
        int l = layers[li];
        const nx_gguf_tensor *gate = tensor(g, "blk.%d.ffn_gate_exps.weight", l);
        const nx_gguf_tensor *up = tensor(g, "blk.%d.ffn_up_exps.weight", l);
        const nx_gguf_tensor *down = tensor(g, "blk.%d.ffn_down_exps.weight", l);
        const nx_gguf_tensor *gu = tensor(gf, "blk.%d.ffn_gate_up_exps.weight", l);
        assert_null(nx_gguf_find_tensor(gf, "blk.0.ffn_gate_exps.weight"));
        assert_int_equal(gate->n_dims, 3);
        assert_true(gate->ne[0] == 64 && gate->ne[1] == 32 && gate->ne[2] == 8);
        assert_true(down->ne[0] == 32 && down->ne[1] == 64 && down->ne[2] == 8);
        assert_true(gu->ne[0] == 64 && gu->ne[1] == 64 && gu->ne[2] == 8);
        for (uint64_t x = 0; x < 8; x++) {
            char name[128];
            const char *pre = l == 4 ? "mtp.layers.0" : "model.layers";
            char lay[16] = "";
            if (l != 4) snprintf(lay, sizeof lay, ".%d", l);
            snprintf(name, sizeof name, "%s%s.mlp.experts.%llu.gate_proj.weight", pre, lay, (unsigned long long)x);
            const nx_st_tensor *sg = nx_st_find(st, name);
            snprintf(name, sizeof name, "%s%s.mlp.experts.%llu.up_proj.weight", pre, lay, (unsigned long long)x);
            const nx_st_tensor *su = nx_st_find(st, name);
            snprintf(name, sizeof name, "%s%s.mlp.experts.%llu.down_proj.weight", pre, lay, (unsigned long long)x);
            const nx_st_tensor *sd = nx_st_find(st, name);
            assert_true(sg && su && sd);
            expect_rows(gate, x, 0, 32, sg, 0);
            expect_rows(up, x, 0, 32, su, 0);
            expect_rows(down, x, 0, 64, sd, 0);
            expect_rows(gu, x, 0, 32, sg, 0);
            expect_rows(gu, x, 32, 32, su, 0);
        }
        /* routers F32, shared-expert gate {E, 1} */
        const nx_gguf_tensor *inp = tensor(g, "blk.%d.ffn_gate_inp.weight", l);
        assert_true(inp->type == NX_TYPE_F32 && inp->ne[0] == 64 && inp->ne[1] == 8);
        const nx_gguf_tensor *sh = tensor(g, "blk.%d.ffn_gate_inp_shexp.weight", l);
        assert_true(sh->type == NX_TYPE_F32 && sh->n_dims == 2 && sh->ne[0] == 64 && sh->ne[1] == 1);
        const nx_gguf_tensor *sd = tensor(g, "blk.%d.ffn_down_shexp.weight", l);
        assert_true(sd->ne[0] == 48 && sd->ne[1] == 64);
    }
    nx_str str;
    assert_true(nx_gguf_get_str(g, "general.architecture", &str, &err));
    assert_true(nx_str_eq(str, "qwen35moe"));
    assert_int_equal(u32(g, "qwen35moe.expert_count"), 8);
    assert_int_equal(u32(g, "qwen35moe.expert_used_count"), 2);
    assert_int_equal(u32(g, "qwen35moe.expert_feed_forward_length"), 32);
    assert_int_equal(u32(g, "qwen35moe.expert_shared_feed_forward_length"), 48);
    assert_int_equal(u32(g, "qwen35moe.block_count"), 5);
    assert_null(nx_gguf_find_kv(g, "qwen35moe.feed_forward_length"));   /* no intermediate_size in MoE configs */
    assert_true(nx_gguf_get_str(g, "general.size_label", &str, &err));
    assert_true(nx_str_eq(str, "8x248K"));
    nx_gguf_close(g);
    nx_gguf_close(gf);
    nx_st_close(st);
}

/* Fused fixture b: gate and up are the two halves of each expert's gate_up_proj slab. */
static void test_split_b(void **s) {
    (void)s;
    nx_safetensors *st;
    nx_err err;
    assert_true(nx_st_open_dir(&st, tu_src_path("tests/fixtures/hf-qwen35moe-b"), &err));
    nx_gguf *g, *gf;
    assert_true(nx_gguf_open(&g, convert("tests/fixtures/hf-qwen35moe-b", NX_TYPE_F32, NX_CONVERT_MTP_EMBED, false,
                                         "b32.gguf"), &err));
    assert_true(nx_gguf_open(&gf, convert("tests/fixtures/hf-qwen35moe-b", NX_TYPE_F32, NX_CONVERT_MTP_EMBED, true,
                                          "b32f.gguf"), &err));
    static const int layers[] = {0, 3, 4};
    for (size_t li = 0; li < NX_ARRAY_LEN(layers); li++) {
        int l = layers[li];
        char gu_name[128], d_name[128];
        if (l == 4) {
            snprintf(gu_name, sizeof gu_name, "mtp.layers.0.mlp.experts.gate_up_proj");
            snprintf(d_name, sizeof d_name, "mtp.layers.0.mlp.experts.down_proj");
        } else {
            snprintf(gu_name, sizeof gu_name, "model.language_model.layers.%d.mlp.experts.gate_up_proj", l);
            snprintf(d_name, sizeof d_name, "model.language_model.layers.%d.mlp.experts.down_proj", l);
        }
        const nx_st_tensor *sgu = nx_st_find(st, gu_name), *sd = nx_st_find(st, d_name);
        if (!sgu || !sd) fail_msg("fixture lacks %s / %s", gu_name, d_name);
        const nx_gguf_tensor *gate = tensor(g, "blk.%d.ffn_gate_exps.weight", l);
        const nx_gguf_tensor *up = tensor(g, "blk.%d.ffn_up_exps.weight", l);
        const nx_gguf_tensor *down = tensor(g, "blk.%d.ffn_down_exps.weight", l);
        const nx_gguf_tensor *gu = tensor(gf, "blk.%d.ffn_gate_up_exps.weight", l);
        assert_true(gate->ne[0] == 64 && gate->ne[1] == 32 && gate->ne[2] == 6);
        for (uint64_t x = 0; x < 6; x++) {
            expect_rows(gate, x, 0, 32, sgu, x * 64);
            expect_rows(up, x, 0, 32, sgu, x * 64 + 32);
            expect_rows(down, x, 0, 64, sd, x * 64);
            expect_rows(gu, x, 0, 64, sgu, x * 64);
        }
    }
    assert_int_equal(u32(g, "qwen35moe.expert_count"), 6);
    assert_int_equal(u32(g, "qwen35moe.expert_used_count"), 3);
    assert_int_equal(u32(g, "qwen35moe.expert_shared_feed_forward_length"), 64);
    assert_null(nx_gguf_find_tensor(g, "output.weight"));   /* tied */
    nx_gguf_close(g);
    nx_gguf_close(gf);
    nx_st_close(st);
}

/* Q8_0 expert tensors: the quantiser applied to the F32 conversion, expert by expert. */
static void test_q8_0_experts(void **s) {
    (void)s;
    nx_gguf *g32, *g8;
    nx_err err;
    assert_true(nx_gguf_open(&g32, convert("tests/fixtures/hf-qwen35moe-b", NX_TYPE_F32, NX_CONVERT_MTP_EMBED, false,
                                           "q32.gguf"), &err));
    assert_true(nx_gguf_open(&g8, convert("tests/fixtures/hf-qwen35moe-b", NX_TYPE_Q8_0, NX_CONVERT_MTP_EMBED, false,
                                          "q8.gguf"), &err));
    int n3 = 0;
    for (uint64_t i = 0; i < g8->n_tensors; i++) {
        const nx_gguf_tensor *b = &g8->tensors[i];
        if (b->n_dims != 3) continue;
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)b->name.len, b->name.ptr);
        const nx_gguf_tensor *a = nx_gguf_find_tensor(g32, name);
        assert_non_null(a);
        assert_int_equal(b->type, NX_TYPE_Q8_0);
        void *want = malloc(b->nbytes);
        nx_type_get(NX_TYPE_Q8_0)->from_float(a->data, want, (int64_t)(a->ne[0] * a->ne[1] * a->ne[2]));
        assert_memory_equal(want, b->data, b->nbytes);
        free(want);
        n3++;
    }
    assert_int_equal(n3, 15);   /* 3 per layer, 4 layers + MTP */
    /* the routers stay F32 whatever the output type */
    assert_int_equal(nx_gguf_find_tensor(g8, "blk.2.ffn_gate_inp.weight")->type, NX_TYPE_F32);
    assert_int_equal(nx_gguf_find_tensor(g8, "blk.2.ffn_gate_inp_shexp.weight")->type, NX_TYPE_F32);
    nx_gguf_close(g32);
    nx_gguf_close(g8);
}

/* The converted files load in nextn with the checkpoint's MoE hyper-parameters. */
static void load_and_check(const char *path, uint32_t n_expert, uint32_t k, uint32_t ffe, uint32_t ffs, bool want_mtp) {
    nx_model *m;
    nx_err err;
    if (!nx_model_load(&m, path, want_mtp, &err)) fail_msg("nextn cannot load %s: %s", path, err.msg);
    assert_true(m->hp.moe);
    assert_int_equal(m->hp.n_expert, n_expert);
    assert_int_equal(m->hp.n_expert_used, k);
    assert_int_equal(m->hp.n_ff_exp, ffe);
    assert_int_equal(m->hp.n_ff_shexp, ffs);
    assert_int_equal(m->hp.n_layer, 4);
    for (uint32_t l = 0; l < m->hp.n_layer; l++) assert_true(m->layers[l].is_moe);
    nx_model_free(m);
}

static void test_loads_in_nextn(void **s) {
    (void)s;
    load_and_check(convert("tests/fixtures/hf-qwen35moe-a", NX_TYPE_F32, NX_CONVERT_MTP_EMBED, false, "la.gguf"), 8, 2,
                   32, 48, true);
    load_and_check(convert("tests/fixtures/hf-qwen35moe-a", NX_TYPE_Q8_0, NX_CONVERT_MTP_EMBED, true, "laf.gguf"), 8, 2,
                   32, 48, true);
    load_and_check(convert("tests/fixtures/hf-qwen35moe-b", NX_TYPE_F16, NX_CONVERT_MTP_EMBED, false, "lb.gguf"), 6, 3,
                   32, 64, true);
    load_and_check(convert("tests/fixtures/hf-qwen35moe-b", NX_TYPE_BF16, NX_CONVERT_MTP_DROP, true, "lbt.gguf"), 6, 3,
                   32, 64, false);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama_identical),
        cmocka_unit_test(test_stacked_a),
        cmocka_unit_test(test_split_b),
        cmocka_unit_test(test_q8_0_experts),
        cmocka_unit_test(test_loads_in_nextn),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    for (int i = 0; i < n_outputs; i++) remove(outputs[i]);
    return rc;
}
