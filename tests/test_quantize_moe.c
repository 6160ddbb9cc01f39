/* test_quantize_moe.c - `nextn quantize` on qwen35moe files against llama.cpp's llama-quantize.
 *
 * Expected outputs come from llama.cpp (snapshot d32676d7, build/bin/llama-quantize, no imatrix,
 * 1 thread), recorded in tests/fixtures/quantize/ (README there):
 *   - moe-llama-quantize.txt: size and FNV-1a 64 of llama-quantize's output for each (input, mix),
 *     and of each input (so a changed generator is reported as such, not as a quantizer bug);
 *   - tiny-moe-<mix>.types: the type llama-quantize chose for every tensor of the mkmodel
 *     `tiny-moe` preset (E 256, 8 experts: the "8-expert" rules apply; expert and shared widths
 *     256 / 512, so the K-quants apply without fallback), in its output order.
 * Inputs: `tiny-moe` F16 (seed 1, MTP; also with --fuse-gate-up-exps), and the MoE HF fixtures
 * converted to F16 by `nextn convert` (rows of 32-64: the fallback types, and for fixture a's
 * shared-expert rows of 48 in q8_0 llama-quantize's refusal; fixture b has 6 experts, so only the
 * block-number rule for ffn_down applies there).  Mixes q8_0, q4_k_m, q6_k (and on tiny-moe
 * q4_k_s, q5_k_m).
 * What the rules do is in src/convert/quantize.h; here every output must equal llama-quantize's
 * byte for byte, and for tiny-moe the per-tensor types are compared first (a clearer message). */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert/convert.h"
#include "convert/mkmodel.h"
#include "convert/quantize.h"
#include "gguf/gguf.h"
#include "quant/quant.h"

static char made[32][512];
static int n_made;

static const char *tmp(const char *tag) {
    assert_true(n_made < 32);
    snprintf(made[n_made], sizeof made[0], "%s", tu_tmp_path(tag));
    return made[n_made++];
}

#define MANIFEST "tests/fixtures/quantize/moe-llama-quantize.txt"

static bool recorded(const char *key1, const char *key2, unsigned long long *size, unsigned long long *hash) {
    return tu_recorded(MANIFEST, key1, key2, size, hash);
}

static void expect_recorded(const char *key1, const char *key2, const char *path) {
    tu_expect_recorded(MANIFEST, key1, key2, path);
}

static const char *tiny_moe(bool fuse) {
    static const char *path[2];
    if (path[fuse]) return path[fuse];
    path[fuse] = tmp(fuse ? "tiny-moe-fused-f16.gguf" : "tiny-moe-f16.gguf");
    nx_mk_options o = {.preset = "tiny-moe", .type = NX_TYPE_F16, .seed = 1, .mtp = true, .tie = -1,
                       .fuse_gate_up = fuse};
    nx_err err;
    if (!nx_mkmodel_write(&o, path[fuse], NULL, &err)) fail_msg("mkmodel: %s", err.msg);
    expect_recorded("input", fuse ? "tiny-moe-fused" : "tiny-moe", path[fuse]);
    return path[fuse];
}

/* NULL (and the message in *err) when nx_quantize_file fails. */
static const char *try_quantize(const char *in, const char *mix_name, nx_err *err) {
    const nx_quant_mix *mix = nx_quant_mix_find(mix_name);
    assert_non_null(mix);
    const char *out = tmp(mix_name);
    nx_pool *pool = nx_pool_create(2, err);
    assert_non_null(pool);
    bool ok = nx_quantize_file(in, out, mix, pool, NULL, NULL, err);
    nx_pool_free(pool);
    return ok ? out : NULL;
}

static const char *quantize(const char *in, const char *mix_name) {
    nx_err err;
    const char *out = try_quantize(in, mix_name, &err);
    if (!out) fail_msg("%s", err.msg);
    return out;
}

/* Types in llama-quantize's order, then the whole file. */
static void check_tiny_moe(const char *mix_name) {
    const char *out = quantize(tiny_moe(false), mix_name);
    nx_gguf *q;
    nx_err err;
    assert_true(nx_gguf_open(&q, out, &err));
    char path[256];
    snprintf(path, sizeof path, "tests/fixtures/quantize/tiny-moe-%s.types", mix_name);
    size_t len;
    char *want = tu_read_file(tu_src_path(path), &len);
    assert_non_null(want);
    uint64_t i = 0;
    for (char *line = want, *nl; (nl = strchr(line, '\n')); line = nl + 1, i++) {
        *nl = 0;
        char name[128], type[16];
        assert_int_equal(sscanf(line, "%127s %15s", name, type), 2);
        if (i >= q->n_tensors) fail_msg("%s: fewer tensors than llama.cpp", mix_name);
        const nx_gguf_tensor *t = &q->tensors[i];
        if (!nx_str_eq(t->name, name))
            fail_msg("%s: tensor %llu is %.*s, llama.cpp has %s", mix_name, (unsigned long long)i, (int)t->name.len,
                     t->name.ptr, name);
        nx_type tt;
        assert_true(nx_type_from_name(type, &tt));
        if (t->type != (uint32_t)tt) fail_msg("%s: %s is %s, llama.cpp chose %s", mix_name, name, nx_type_name(t->type), type);
    }
    assert_int_equal(i, q->n_tensors);
    free(want);
    nx_gguf_close(q);
    expect_recorded("tiny-moe", mix_name, out);
    remove(out);
}

static void test_tiny_moe_q8_0(void **s) { (void)s; check_tiny_moe("q8_0"); }
static void test_tiny_moe_q4_k_m(void **s) { (void)s; check_tiny_moe("q4_k_m"); }
static void test_tiny_moe_q6_k(void **s) { (void)s; check_tiny_moe("q6_k"); }
static void test_tiny_moe_q4_k_s(void **s) { (void)s; check_tiny_moe("q4_k_s"); }
static void test_tiny_moe_q5_k_m(void **s) { (void)s; check_tiny_moe("q5_k_m"); }

static void test_tiny_moe_fused(void **s) {
    (void)s;
    const char *out = quantize(tiny_moe(true), "q4_k_m");
    expect_recorded("tiny-moe-fused", "q4_k_m", out);
    remove(out);
}

/* The converted HF fixtures: small rows, so the fallback types; 8 and 6 experts. */
static void check_hf(const char *fixture) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", tu_src_path("tests/fixtures"), fixture);
    const char *f16 = tmp("hf-f16.gguf");
    nx_convert_opts o = {.out_type = NX_TYPE_F16};
    nx_err err;
    if (!nx_convert_hf(dir, f16, &o, &err)) fail_msg("%s", err.msg);
    expect_recorded("input", fixture, f16);
    static const char *const mixes[] = {"q8_0", "q4_k_m", "q6_k"};
    for (size_t i = 0; i < NX_ARRAY_LEN(mixes); i++) {
        unsigned long long size, hash;
        const char *out = try_quantize(f16, mixes[i], &err);
        if (recorded(fixture, mixes[i], &size, &hash)) {
            if (!out) fail_msg("%s %s: %s (llama-quantize wrote it)", fixture, mixes[i], err.msg);
            expect_recorded(fixture, mixes[i], out);
            remove(out);
        } else {   /* llama-quantize has no fallback for rows of 48 in q8_0: neither do we */
            if (out) fail_msg("%s %s: quantized, but llama-quantize refuses this file", fixture, mixes[i]);
            assert_non_null(strstr(err.msg, "no fallback type"));
        }
    }
}

static void test_hf_a(void **s) { (void)s; check_hf("hf-qwen35moe-a"); }
static void test_hf_b(void **s) { (void)s; check_hf("hf-qwen35moe-b"); }

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiny_moe_q8_0), cmocka_unit_test(test_tiny_moe_q4_k_m),
        cmocka_unit_test(test_tiny_moe_q4_k_s), cmocka_unit_test(test_tiny_moe_q5_k_m),
        cmocka_unit_test(test_tiny_moe_q6_k), cmocka_unit_test(test_tiny_moe_fused),
        cmocka_unit_test(test_hf_a),          cmocka_unit_test(test_hf_b),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    for (int i = 0; i < n_made; i++) remove(made[i]);
    return rc;
}
