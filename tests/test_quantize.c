/* test_quantize.c - `nextn quantize` against llama.cpp's llama-quantize.
 *
 * Expected outputs come from llama.cpp (snapshot d32676d7, build/bin/llama-quantize, no imatrix,
 * 1 thread), committed under tests/fixtures/quantize/ (README there):
 *   - tiny-<mix>.types: the type llama-quantize chose for every tensor of the mkmodel `tiny`
 *     preset (F16, seed 1, MTP), in its output order, for every mix;
 *   - hf-qwen35-a-f16-<mix>.llama.gguf: llama-quantize's whole output file for fixture a
 *     converted to F16 (rows of 64: the K-quant fallbacks), which ours must equal byte for byte.
 * The data of every re-quantised tiny tensor is also checked against quant.c's reference
 * quantiser applied to the dequantised source. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert/convert.h"
#include "gguf/gguf.h"
#include "convert/mkmodel.h"
#include "quant/quant.h"
#include "convert/quantize.h"

static char made[64][512];
static int n_made;

static const char *tmp(const char *tag) {
    assert_true(n_made < 64);
    snprintf(made[n_made], sizeof made[0], "%s", tu_tmp_path(tag));
    return made[n_made++];
}

static const char *tiny_f16(void) {
    static const char *path;
    if (path) return path;
    path = tmp("tiny-f16.gguf");
    nx_mk_options o = {.preset = "tiny", .type = NX_TYPE_F16, .seed = 1, .mtp = true, .tie = -1};
    nx_err err;
    if (!nx_mkmodel_write(&o, path, NULL, &err)) fail_msg("mkmodel: %s", err.msg);
    return path;
}

/* The overrides of the "dynamic" mix fixture (tiny-dyn.types: llama-quantize with the same
 * --tensor-type options on top of Q3_K_M). */
static const char *const dyn_overrides[] = {
    "ffn_up=iq4_xs", "ffn_gate=q2_k", "attn_qkv=iq4_nl", "blk\\.[0-2]\\.ffn_down=q8_0", "ssm_out=q5_k", "attn_gate=q4_k",
};

static void check_tiny_mix_ov(const char *mix_name, const char *fixture, const char *const *ov_args, size_t n_ov) {
    const nx_quant_mix *mix = nx_quant_mix_find(mix_name);
    assert_non_null(mix);
    const char *out = tmp(fixture);
    nx_err err;
    nx_quant_override ov[8];
    assert_true(n_ov <= 8);
    for (size_t i = 0; i < n_ov; i++)
        if (!nx_quant_override_parse(ov_args[i], &ov[i], &err)) fail_msg("%s", err.msg);
    nx_pool *pool = nx_pool_create(2, &err);
    if (!nx_quantize_file_ov(tiny_f16(), out, mix, ov, n_ov, pool, NULL, NULL, &err)) fail_msg("%s", err.msg);
    nx_pool_free(pool);
    nx_gguf *in, *q;
    assert_true(nx_gguf_open(&in, tiny_f16(), &err));
    assert_true(nx_gguf_open(&q, out, &err));
    /* types and order as llama-quantize */
    char path[256];
    snprintf(path, sizeof path, "tests/fixtures/quantize/tiny-%s.types", fixture);
    size_t len;
    char *want = tu_read_file(tu_src_path(path), &len);
    assert_non_null(want);
    char *line = want;
    uint64_t i = 0;
    for (char *nl; (nl = strchr(line, '\n')); line = nl + 1, i++) {
        *nl = 0;
        char name[128], type[16];
        assert_int_equal(sscanf(line, "%127s %15s", name, type), 2);
        if (i >= q->n_tensors) fail_msg("%s: fewer tensors than llama.cpp", mix_name);
        const nx_gguf_tensor *t = &q->tensors[i];
        if (!nx_str_eq(t->name, name)) fail_msg("%s: tensor %llu is %.*s, llama.cpp has %s", mix_name,
                                                (unsigned long long)i, (int)t->name.len, t->name.ptr, name);
        nx_type tt;
        assert_true(nx_type_from_name(type, &tt));
        if (t->type != (uint32_t)tt) fail_msg("%s: %s is %s, llama.cpp chose %s", mix_name, name, nx_type_name(t->type), type);
        /* data: reference quantiser of the dequantised source, or an unchanged copy */
        const nx_gguf_tensor *s = nx_gguf_find_tensor(in, name);
        assert_non_null(s);
        if (s->type == t->type) {
            assert_int_equal(s->nbytes, t->nbytes);
            assert_memory_equal(s->data, t->data, s->nbytes);
        } else {
            uint64_t n = s->ne[0] * s->ne[1] * s->ne[2] * s->ne[3];
            float *f = malloc(n * sizeof *f);
            void *b = malloc(t->nbytes);
            nx_type_get(s->type)->to_float(s->data, f, (int64_t)n);
            nx_type_get(t->type)->from_float(f, b, (int64_t)n);
            assert_memory_equal(b, t->data, t->nbytes);
            free(f);
            free(b);
        }
    }
    assert_int_equal(i, q->n_tensors);
    uint32_t ft;
    assert_true(nx_gguf_get_u32(q, "general.file_type", &ft, &err));
    assert_int_equal(ft, mix->ftype);
    assert_int_equal(q->n_kv, in->n_kv);
    free(want);
    nx_gguf_close(in);
    nx_gguf_close(q);
}

static void check_tiny_mix(const char *mix_name) { check_tiny_mix_ov(mix_name, mix_name, NULL, 0); }

static void test_tiny_q8_0(void **s) { (void)s; check_tiny_mix("q8_0"); }
static void test_tiny_q4_0(void **s) { (void)s; check_tiny_mix("q4_0"); }
static void test_tiny_q5_0(void **s) { (void)s; check_tiny_mix("q5_0"); }
static void test_tiny_q6_k(void **s) { (void)s; check_tiny_mix("q6_k"); }
static void test_tiny_q4_k_m(void **s) { (void)s; check_tiny_mix("q4_k_m"); }
static void test_tiny_q2_k(void **s) { (void)s; check_tiny_mix("q2_k"); }
static void test_tiny_q3_k_s(void **s) { (void)s; check_tiny_mix("q3_k_s"); }
static void test_tiny_q3_k_m(void **s) { (void)s; check_tiny_mix("q3_k_m"); }
static void test_tiny_q3_k_l(void **s) { (void)s; check_tiny_mix("q3_k_l"); }
static void test_tiny_iq4_nl(void **s) { (void)s; check_tiny_mix("iq4_nl"); }
static void test_tiny_iq4_xs(void **s) { (void)s; check_tiny_mix("iq4_xs"); }
static void test_tiny_q4_1(void **s) { (void)s; check_tiny_mix("q4_1"); }
static void test_tiny_q5_1(void **s) { (void)s; check_tiny_mix("q5_1"); }
static void test_tiny_q4_k_s(void **s) { (void)s; check_tiny_mix("q4_k_s"); }
static void test_tiny_q5_k_s(void **s) { (void)s; check_tiny_mix("q5_k_s"); }
static void test_tiny_q5_k_m(void **s) { (void)s; check_tiny_mix("q5_k_m"); }
static void test_tiny_dynamic(void **s) {
    (void)s;
    check_tiny_mix_ov("q3_k_m", "dyn", dyn_overrides, NX_ARRAY_LEN(dyn_overrides));
}

/* Whole files equal to llama-quantize's for a converted fixture (a: GQA 2, b: GQA 4, tied). */
static void check_file_of(const char *fx, const char *mix_name) {
    char tag[64];
    snprintf(tag, sizeof tag, "%s-f16.gguf", fx);
    const char *f16 = tmp(tag);
    nx_convert_opts o = {.out_type = NX_TYPE_F16};
    nx_err err;
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", tu_src_path("tests/fixtures"), fx);
    if (!nx_convert_hf(dir, f16, &o, &err)) fail_msg("%s", err.msg);
    const char *out = tmp(mix_name);
    if (!nx_quantize_file(f16, out, nx_quant_mix_find(mix_name), NULL, NULL, NULL, &err)) fail_msg("%s", err.msg);
    char path[256];
    snprintf(path, sizeof path, "tests/fixtures/quantize/%s-f16-%s.llama.gguf", fx, mix_name);
    size_t la, lb;
    void *a = tu_read_file(tu_src_path(path), &la), *b = tu_read_file(out, &lb);
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(la, lb);
    assert_memory_equal(a, b, la);
    free(a);
    free(b);
}

static void check_file(const char *mix_name) { check_file_of("hf-qwen35-a", mix_name); }

static void test_file_q4_0(void **s) { (void)s; check_file("q4_0"); }
static void test_file_b_q2_k(void **s) { (void)s; check_file_of("hf-qwen35-b", "q2_k"); }
static void test_file_b_iq4_xs(void **s) { (void)s; check_file_of("hf-qwen35-b", "iq4_xs"); }
static void test_file_a_q3_k_m(void **s) { (void)s; check_file_of("hf-qwen35-a", "q3_k_m"); }
static void test_file_q4_k_m(void **s) { (void)s; check_file("q4_k_m"); }
static void test_file_q5_k_m(void **s) { (void)s; check_file("q5_k_m"); }

/* llama-quantize's options (--pure, --output-tensor-type, --token-embedding-type,
 * --allow-requantize) and the unquantised targets, whole files against its outputs
 * (tests/fixtures/quantize/options-llama-quantize.txt). */
#define OPTIONS_MANIFEST "tests/fixtures/quantize/options-llama-quantize.txt"

static const char *quantize_opts(const char *in, const char *mix_name, const char *tag, const nx_quant_opts *o,
                                 nx_err *err) {
    const char *out = tmp(tag);
    nx_pool *pool = nx_pool_create(2, err);
    assert_non_null(pool);
    bool ok = nx_quantize_file_ex(in, out, nx_quant_mix_find(mix_name), o, pool, NULL, NULL, err);
    nx_pool_free(pool);
    return ok ? out : NULL;
}

static void expect_option_case(const char *mix_name, const char *tag, const nx_quant_opts *o) {
    nx_err err;
    const char *out = quantize_opts(tiny_f16(), mix_name, tag, o, &err);
    if (!out) fail_msg("%s: %s", tag, err.msg);
    tu_expect_recorded(OPTIONS_MANIFEST, "tiny", tag, out);
}

static void test_options(void **s) {
    (void)s;
    tu_expect_recorded(OPTIONS_MANIFEST, "input", "tiny", tiny_f16());
    const nx_quant_opts none = {0};
    expect_option_case("f16", "f16", &none);
    expect_option_case("bf16", "bf16", &none);
    expect_option_case("f32", "f32", &none);
    const nx_quant_opts pure = {.pure = true};
    expect_option_case("q4_k_m", "pure", &pure);
    nx_quant_override ov;
    nx_err err;
    assert_true(nx_quant_override_parse("ffn_up=q8_0", &ov, &err));
    const nx_quant_opts puretv = {.pure = true, .overrides = &ov, .n_overrides = 1};
    expect_option_case("q4_k_m", "puretv", &puretv);
    const nx_quant_opts ot = {.has_output_type = true, .output_type = NX_TYPE_Q8_0, .has_token_embd_type = true,
                              .token_embd_type = NX_TYPE_Q4_0};
    expect_option_case("q4_k_m", "ot", &ot);
    /* re-quantising: refused without allow_requantize, naming a tensor, its type and the field */
    const char *q = quantize_opts(tiny_f16(), "q4_k_s", "q4_k_s.gguf", &none, &err);
    assert_non_null(q);
    assert_null(quantize_opts(q, "q8_0", "rq-refused", &none, &err));
    assert_non_null(strstr(err.msg, "already quantised"));
    assert_non_null(strstr(err.msg, "allow_requantize"));
    const nx_quant_opts rq = {.allow_requantize = true};
    const char *out = quantize_opts(q, "q8_0", "rq", &rq, &err);
    if (!out) fail_msg("rq: %s", err.msg);
    tu_expect_recorded(OPTIONS_MANIFEST, "tiny", "rq", out);
    /* a tensor that keeps its type is copied without allow_requantize (q8_0 of a q8_0 file) */
    const char *q8 = quantize_opts(tiny_f16(), "q8_0", "q8.gguf", &none, &err);
    assert_non_null(q8);
    assert_non_null(quantize_opts(q8, "q8_0", "q8-again", &none, &err));
    /* an explicit embeddings / head type gets no fallback: fixture a's rows of 64 do not fit q4_K */
    char dir[512];
    snprintf(dir, sizeof dir, "%s/hf-qwen35-a", tu_src_path("tests/fixtures"));
    const char *a16 = tmp("a-f16-opts.gguf");
    nx_convert_opts co = {.out_type = NX_TYPE_F16};
    if (!nx_convert_hf(dir, a16, &co, &err)) fail_msg("%s", err.msg);
    const nx_quant_opts bad = {.has_token_embd_type = true, .token_embd_type = NX_TYPE_Q4_K};
    const char *o2 = tmp("bad-embd");
    nx_pool *pool = nx_pool_create(1, &err);
    assert_false(nx_quantize_file_ex(a16, o2, nx_quant_mix_find("q8_0"), &bad, pool, NULL, NULL, &err));
    nx_pool_free(pool);
    assert_non_null(strstr(err.msg, "token_embd.weight"));
    assert_non_null(strstr(err.msg, "token_embd_type"));
}

static void test_errors(void **s) {
    (void)s;
    nx_err err;
    assert_null(nx_quant_mix_find("q3_k"));
    assert_null(nx_quant_mix_find("iq2_xs"));
    nx_quant_override ov;
    assert_false(nx_quant_override_parse("ffn_up", &ov, &err));
    assert_non_null(strstr(err.msg, "PATTERN=TYPE"));
    assert_false(nx_quant_override_parse("=q4_k", &ov, &err));
    assert_false(nx_quant_override_parse("ffn_up=", &ov, &err));
    assert_false(nx_quant_override_parse("ffn_up=iq2_xs", &ov, &err));
    assert_non_null(strstr(err.msg, "iq2_xs"));
    assert_false(nx_quant_override_parse("ffn_(up=q4_k", &ov, &err));
    assert_non_null(strstr(err.msg, "pattern"));
    assert_true(nx_quant_override_parse("Blk\\.1\\.FFN_UP=Q6_K", &ov, &err));
    assert_string_equal(ov.pattern, "blk\\.1\\.ffn_up");
    assert_int_equal(ov.type, NX_TYPE_Q6_K);
    assert_non_null(nx_quant_mix_find("Q4_K_M"));
    assert_false(nx_quantize_file("/nonexistent/x.gguf", tmp("x"), nx_quant_mix_find("q8_0"), NULL, NULL, NULL, &err));
    assert_non_null(strstr(err.msg, "/nonexistent/x.gguf"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiny_q8_0),   cmocka_unit_test(test_tiny_q4_0), cmocka_unit_test(test_tiny_q5_0),
        cmocka_unit_test(test_tiny_q6_k),   cmocka_unit_test(test_tiny_q4_k_m),
        cmocka_unit_test(test_tiny_q2_k),   cmocka_unit_test(test_tiny_q3_k_s),  cmocka_unit_test(test_tiny_q3_k_m),
        cmocka_unit_test(test_tiny_q3_k_l), cmocka_unit_test(test_tiny_iq4_nl),  cmocka_unit_test(test_tiny_iq4_xs),
        cmocka_unit_test(test_tiny_q4_1),   cmocka_unit_test(test_tiny_q5_1),    cmocka_unit_test(test_tiny_q4_k_s),
        cmocka_unit_test(test_tiny_q5_k_s), cmocka_unit_test(test_tiny_q5_k_m),
        cmocka_unit_test(test_tiny_dynamic),
        cmocka_unit_test(test_file_b_q2_k), cmocka_unit_test(test_file_b_iq4_xs), cmocka_unit_test(test_file_a_q3_k_m),
        cmocka_unit_test(test_file_q4_0),   cmocka_unit_test(test_file_q4_k_m), cmocka_unit_test(test_file_q5_k_m),
        cmocka_unit_test(test_options),     cmocka_unit_test(test_errors),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    for (int i = 0; i < n_made; i++) remove(made[i]);
    return rc;
}
