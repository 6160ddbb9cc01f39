/* test_gguf.c - GGUF reader/writer: round trips of every value type, exact writer bytes checked
 * against an independent hand encoder, and malformed files (truncations, corrupt counts,
 * lengths, types, offsets, random mutations) that must fail cleanly with a precise message. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "quant/quant.h"

/* ---- an independent little encoder for hand-made files -------------------------------------- */
typedef struct tb { uint8_t *p; size_t len, cap; } tb;

static void tb_put(tb *b, const void *src, size_t n) {
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    if (n) memcpy(b->p + b->len, src, n);
    b->len += n;
}
static void tb_u8(tb *b, uint8_t v) { tb_put(b, &v, 1); }
static void tb_u32(tb *b, uint32_t v) { uint8_t x[4] = {v, v >> 8, v >> 16, v >> 24}; tb_put(b, x, 4); }
static void tb_u64(tb *b, uint64_t v) { tb_u32(b, (uint32_t)v); tb_u32(b, (uint32_t)(v >> 32)); }
static void tb_str(tb *b, const char *s) { tb_u64(b, strlen(s)); tb_put(b, s, strlen(s)); }
static void tb_header(tb *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    tb_put(b, "GGUF", 4); tb_u32(b, version); tb_u64(b, n_tensors); tb_u64(b, n_kv);
}
static void tb_pad(tb *b, size_t a) { while (b->len % a) tb_u8(b, 0); }
static void tb_kv_u32(tb *b, const char *k, uint32_t v) { tb_str(b, k); tb_u32(b, NX_GGUF_UINT32); tb_u32(b, v); }
/* tensor info with n_dims entries of ne */
static void tb_tinfo(tb *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t off) {
    tb_str(b, name); tb_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++) tb_u64(b, ne[d]);
    tb_u32(b, type); tb_u64(b, off);
}
static void tb_zeros(tb *b, size_t n) { for (size_t i = 0; i < n; i++) tb_u8(b, 0); }

/* ---- helpers ------------------------------------------------------------------------------ */

/* Reads every value and every tensor byte range through the accessors (ASan checks the reads). */
static uint64_t walk(const nx_gguf *g) {
    uint64_t acc = 0;
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const nx_gguf_kv *kv = &g->kv[i];
        for (uint64_t j = 0; j < kv->key.len; j++) acc += (uint8_t)kv->key.ptr[j];
        if (kv->type == NX_GGUF_STRING)
            for (uint64_t j = 0; j < kv->v.str.len; j++) acc += (uint8_t)kv->v.str.ptr[j];
        if (kv->type == NX_GGUF_ARRAY) {
            for (uint64_t j = 0; j < kv->arr_count; j++) {
                acc += (uint64_t)nx_gguf_arr_int(kv, j);
                double d = nx_gguf_arr_f64(kv, j);
                acc += d == d ? (uint64_t)(d != 0) : 0;
                nx_str s = nx_gguf_arr_str(kv, j);
                if (s.len) acc += (uint8_t)s.ptr[0] + (uint8_t)s.ptr[s.len - 1];
            }
            for (uint64_t j = 0; j < kv->arr_bytes; j++) acc += kv->arr_data[j];
        }
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const nx_gguf_tensor *t = &g->tensors[i];
        const uint8_t *d = t->data;
        acc += d[0] + d[t->nbytes - 1];
    }
    return acc;
}

/* Parses an exact-size heap copy of b[0..len) (so ASan sees any overread); expects failure with
 * a message that starts with the file name and contains `needle`. */
static void expect_fail_n(const uint8_t *p, size_t len, const char *needle) {
    uint8_t *copy = malloc(len ? len : 1);
    assert_non_null(copy);
    if (len) memcpy(copy, p, len);
    nx_gguf *g = (nx_gguf *)1;
    nx_err err = {{0}};
    bool ok = nx_gguf_open_memory(&g, copy, len, "bad.gguf", &err);
    if (ok) {
        walk(g);
        nx_gguf_close(g);
        free(copy);
        fail_msg("expected failure containing '%s' but the file parsed", needle);
    }
    assert_null(g);
    if (strncmp(err.msg, "bad.gguf: ", 10) != 0) fail_msg("message does not name the file: '%s'", err.msg);
    if (needle && !strstr(err.msg, needle)) fail_msg("message '%s' lacks '%s'", err.msg, needle);
    free(copy);
}
static void expect_fail(const tb *b, const char *needle) { expect_fail_n(b->p, b->len, needle); }

static nx_gguf *expect_ok(const tb *b) {
    nx_gguf *g = NULL;
    nx_err err = {{0}};
    if (!nx_gguf_open_memory(&g, b->p, b->len, "ok.gguf", &err)) fail_msg("unexpected failure: %s", err.msg);
    walk(g);
    return g;
}

static void must(bool ok, const nx_err *err) {
    if (!ok) fail_msg("unexpected failure: %s", err->msg);
}

/* ---- the sample file used by several tests -------------------------------------------------- */

#define NF32 48
static float f32_data[3][NF32 / 3];
static uint8_t q4_data[2 * 2 * 18];   /* q4_0 [64, 2]: 2 blocks per row, 18 bytes per block */
static uint16_t f16_data[2 * 3 * 1 * 2];

typedef struct fill_ctx { int calls; uint8_t seed; bool fail; } fill_ctx;
static bool fill_q8(void *user, void *dst, uint64_t nbytes, nx_err *err) {
    fill_ctx *fc = user;
    fc->calls++;
    if (fc->fail) return nx_fail(err, "synthetic fill failure");
    for (uint64_t i = 0; i < nbytes; i++) ((uint8_t *)dst)[i] = (uint8_t)(fc->seed + i * 7);
    return true;
}

static const char *const tok_strs[] = {"!", "\"", "", "hello world", "\xc4\xa0the", "<|im_end|>"};

/* Builds a writer with every value type and four tensors (pointer and callback). */
static nx_gguf_writer *sample_writer(fill_ctx *fc) {
    nx_err err = {{0}};
    nx_gguf_writer *w = nx_gguf_writer_new(&err);
    assert_non_null(w);
    must(nx_gguf_add_str(w, "general.architecture", "qwen35", &err), &err);
    must(nx_gguf_add_u8(w, "t.u8", 255, &err), &err);
    must(nx_gguf_add_i8(w, "t.i8", -128, &err), &err);
    must(nx_gguf_add_u16(w, "t.u16", 65535, &err), &err);
    must(nx_gguf_add_i16(w, "t.i16", -32768, &err), &err);
    must(nx_gguf_add_u32(w, "t.u32", 4000000000u, &err), &err);
    must(nx_gguf_add_i32(w, "t.i32", -2000000000, &err), &err);
    must(nx_gguf_add_u64(w, "t.u64", UINT64_MAX, &err), &err);
    must(nx_gguf_add_i64(w, "t.i64", INT64_MIN, &err), &err);
    must(nx_gguf_add_f32(w, "t.f32", 1e-6f, &err), &err);
    must(nx_gguf_add_f64(w, "t.f64", -2.5e300, &err), &err);
    must(nx_gguf_add_bool(w, "t.bool", true, &err), &err);
    must(nx_gguf_add_str(w, "t.empty_str", "", &err), &err);
    must(nx_gguf_add_str(w, "t.quote", "say \"hi\"\n", &err), &err);
    const int32_t ai32[] = {-1, 0, 7, INT32_MAX};
    must(nx_gguf_add_arr(w, "t.arr_i32", NX_GGUF_INT32, ai32, 4, &err), &err);
    const uint8_t ab[] = {1, 0, 1};
    must(nx_gguf_add_arr(w, "t.arr_bool", NX_GGUF_BOOL, ab, 3, &err), &err);
    const float af[] = {0.5f, -1.25f};
    must(nx_gguf_add_arr(w, "t.arr_f32", NX_GGUF_FLOAT32, af, 2, &err), &err);
    const double ad[] = {1e100};
    must(nx_gguf_add_arr(w, "t.arr_f64", NX_GGUF_FLOAT64, ad, 1, &err), &err);
    const uint64_t au64[] = {UINT64_MAX, 3};
    must(nx_gguf_add_arr(w, "t.arr_u64", NX_GGUF_UINT64, au64, 2, &err), &err);
    const int16_t ai16[] = {-300, 300};
    must(nx_gguf_add_arr(w, "t.arr_i16", NX_GGUF_INT16, ai16, 2, &err), &err);
    const uint16_t au16[] = {65535};
    must(nx_gguf_add_arr(w, "t.arr_u16", NX_GGUF_UINT16, au16, 1, &err), &err);
    const int8_t ai8[] = {-5};
    must(nx_gguf_add_arr(w, "t.arr_i8", NX_GGUF_INT8, ai8, 1, &err), &err);
    const uint8_t au8[] = {200, 100};
    must(nx_gguf_add_arr(w, "t.arr_u8", NX_GGUF_UINT8, au8, 2, &err), &err);
    const uint32_t au32[] = {5000000000u % 4294967296u, 127};
    must(nx_gguf_add_arr(w, "t.arr_u32", NX_GGUF_UINT32, au32, 2, &err), &err);
    const int64_t ai64[] = {INT64_MIN, INT64_MAX};
    must(nx_gguf_add_arr(w, "t.arr_i64", NX_GGUF_INT64, ai64, 2, &err), &err);
    must(nx_gguf_add_arr(w, "t.arr_empty", NX_GGUF_UINT32, NULL, 0, &err), &err);
    must(nx_gguf_add_arr_str(w, "tokenizer.ggml.tokens", tok_strs, NX_ARRAY_LEN(tok_strs), &err), &err);
    must(nx_gguf_add_arr_str(w, "t.arr_str_empty", NULL, 0, &err), &err);

    for (int i = 0; i < 3; i++)
        for (int j = 0; j < NF32 / 3; j++) f32_data[i][j] = (float)(i * 100 + j) - 0.5f;
    for (size_t i = 0; i < sizeof q4_data; i++) q4_data[i] = (uint8_t)(i * 13 + 1);
    for (size_t i = 0; i < NX_ARRAY_LEN(f16_data); i++) f16_data[i] = (uint16_t)(0x3c00 + i);
    const uint64_t ne_f32[] = {NF32 / 3, 3};
    must(nx_gguf_add_tensor(w, "blk.0.attn_norm.weight", 0, 2, ne_f32, f32_data, &err), &err);
    const uint64_t ne_q4[] = {64, 2};
    must(nx_gguf_add_tensor(w, "blk.0.ffn_up.weight", 2, 2, ne_q4, q4_data, &err), &err);
    const uint64_t ne_q8[] = {32, 5};
    must(nx_gguf_add_tensor_fn(w, "token_embd.weight", 8, 2, ne_q8, fill_q8, fc, &err), &err);
    const uint64_t ne_f16[] = {2, 3, 1, 2};
    must(nx_gguf_add_tensor(w, "t.4d", 1, 4, ne_f16, f16_data, &err), &err);
    return w;
}

static void check_sample(const nx_gguf *g, uint32_t version, uint64_t alignment) {
    nx_err err = {{0}};
    assert_int_equal(g->version, version);
    assert_int_equal(g->alignment, alignment);
    assert_int_equal(g->n_tensors, 4);
    nx_str s;
    must(nx_gguf_get_str(g, "general.architecture", &s, &err), &err);
    assert_true(nx_str_eq(s, "qwen35"));
    /* kv order is insertion order */
    assert_true(nx_str_eq(g->kv[0].key, "general.architecture"));
    assert_true(nx_str_eq(g->kv[1].key, "t.u8"));
    const nx_gguf_kv *kv;
    assert_non_null(kv = nx_gguf_find_kv(g, "t.u8"));  assert_int_equal(kv->type, NX_GGUF_UINT8);  assert_int_equal(kv->v.u64, 255);
    assert_non_null(kv = nx_gguf_find_kv(g, "t.i8"));  assert_int_equal(kv->type, NX_GGUF_INT8);   assert_int_equal(kv->v.i64, -128);
    assert_non_null(kv = nx_gguf_find_kv(g, "t.u16")); assert_int_equal(kv->type, NX_GGUF_UINT16); assert_int_equal(kv->v.u64, 65535);
    assert_non_null(kv = nx_gguf_find_kv(g, "t.i16")); assert_int_equal(kv->type, NX_GGUF_INT16);  assert_int_equal(kv->v.i64, -32768);
    assert_non_null(kv = nx_gguf_find_kv(g, "t.u32")); assert_int_equal(kv->type, NX_GGUF_UINT32); assert_int_equal(kv->v.u64, 4000000000u);
    assert_non_null(kv = nx_gguf_find_kv(g, "t.i32")); assert_int_equal(kv->type, NX_GGUF_INT32);  assert_int_equal(kv->v.i64, -2000000000);
    assert_non_null(kv = nx_gguf_find_kv(g, "t.u64")); assert_int_equal(kv->type, NX_GGUF_UINT64); assert_true(kv->v.u64 == UINT64_MAX);
    assert_non_null(kv = nx_gguf_find_kv(g, "t.i64")); assert_int_equal(kv->type, NX_GGUF_INT64);  assert_true(kv->v.i64 == INT64_MIN);
    assert_non_null(kv = nx_gguf_find_kv(g, "t.f32")); assert_int_equal(kv->type, NX_GGUF_FLOAT32); assert_true(kv->v.f64 == (double)1e-6f);
    assert_non_null(kv = nx_gguf_find_kv(g, "t.f64")); assert_int_equal(kv->type, NX_GGUF_FLOAT64); assert_true(kv->v.f64 == -2.5e300);
    assert_non_null(kv = nx_gguf_find_kv(g, "t.bool")); assert_int_equal(kv->type, NX_GGUF_BOOL); assert_true(kv->v.b);
    assert_non_null(kv = nx_gguf_find_kv(g, "t.empty_str")); assert_int_equal(kv->type, NX_GGUF_STRING); assert_int_equal(kv->v.str.len, 0);
    must(nx_gguf_get_str(g, "t.quote", &s, &err), &err);
    assert_true(nx_str_eq(s, "say \"hi\"\n"));

    const nx_gguf_kv *a;
    must(nx_gguf_get_arr(g, "t.arr_i32", NX_GGUF_INT32, &a, &err), &err);
    assert_int_equal(a->arr_count, 4);
    assert_int_equal(nx_gguf_arr_int(a, 0), -1);
    assert_int_equal(nx_gguf_arr_int(a, 3), INT32_MAX);
    assert_int_equal(nx_gguf_arr_int(a, 4), 0); /* out of range index: 0, no read */
    must(nx_gguf_get_arr(g, "t.arr_bool", NX_GGUF_BOOL, &a, &err), &err);
    assert_int_equal(nx_gguf_arr_int(a, 0), 1); assert_int_equal(nx_gguf_arr_int(a, 1), 0);
    must(nx_gguf_get_arr(g, "t.arr_f32", NX_GGUF_FLOAT32, &a, &err), &err);
    assert_true(nx_gguf_arr_f64(a, 1) == -1.25);
    must(nx_gguf_get_arr(g, "t.arr_f64", NX_GGUF_FLOAT64, &a, &err), &err);
    assert_true(nx_gguf_arr_f64(a, 0) == 1e100);
    must(nx_gguf_get_arr(g, "t.arr_u64", NX_GGUF_UINT64, &a, &err), &err);
    assert_true((uint64_t)nx_gguf_arr_int(a, 0) == UINT64_MAX);
    must(nx_gguf_get_arr(g, "t.arr_i16", NX_GGUF_INT16, &a, &err), &err);
    assert_int_equal(nx_gguf_arr_int(a, 0), -300);
    must(nx_gguf_get_arr(g, "t.arr_u16", NX_GGUF_UINT16, &a, &err), &err);
    assert_int_equal(nx_gguf_arr_int(a, 0), 65535);
    must(nx_gguf_get_arr(g, "t.arr_i8", NX_GGUF_INT8, &a, &err), &err);
    assert_int_equal(nx_gguf_arr_int(a, 0), -5);
    must(nx_gguf_get_arr(g, "t.arr_u8", NX_GGUF_UINT8, &a, &err), &err);
    assert_int_equal(nx_gguf_arr_int(a, 0), 200);
    must(nx_gguf_get_arr(g, "t.arr_i64", NX_GGUF_INT64, &a, &err), &err);
    assert_true(nx_gguf_arr_int(a, 0) == INT64_MIN && nx_gguf_arr_int(a, 1) == INT64_MAX);
    must(nx_gguf_get_arr(g, "t.arr_empty", NX_GGUF_UINT32, &a, &err), &err);
    assert_int_equal(a->arr_count, 0);
    must(nx_gguf_get_arr(g, "tokenizer.ggml.tokens", NX_GGUF_STRING, &a, &err), &err);
    assert_int_equal(a->arr_count, NX_ARRAY_LEN(tok_strs));
    for (size_t i = 0; i < NX_ARRAY_LEN(tok_strs); i++) assert_true(nx_str_eq(nx_gguf_arr_str(a, i), tok_strs[i]));
    must(nx_gguf_get_arr(g, "t.arr_str_empty", NX_GGUF_STRING, &a, &err), &err);
    assert_int_equal(a->arr_count, 0);

    /* tensors: insertion order, aligned, disjoint, data intact */
    const char *names[] = {"blk.0.attn_norm.weight", "blk.0.ffn_up.weight", "token_embd.weight", "t.4d"};
    const uint32_t types[] = {0, 2, 8, 1};
    const uint64_t nbytes[] = {NF32 * 4, sizeof q4_data, 5 * 34, sizeof f16_data};
    uint64_t expect_off = 0;
    for (int i = 0; i < 4; i++) {
        const nx_gguf_tensor *t = &g->tensors[i];
        assert_true(nx_str_eq(t->name, names[i]));
        assert_ptr_equal(nx_gguf_find_tensor(g, names[i]), t);
        assert_int_equal(t->type, types[i]);
        assert_int_equal(t->nbytes, nbytes[i]);
        assert_int_equal(t->offset, expect_off);
        assert_int_equal(t->offset % alignment, 0);
        assert_ptr_equal(t->data, g->base + g->data_offset + t->offset);
        expect_off += (nbytes[i] + alignment - 1) / alignment * alignment;
    }
    assert_int_equal(g->data_offset % alignment, 0);
    assert_int_equal(g->size, g->data_offset + expect_off); /* last tensor padded like llama.cpp */
    const nx_gguf_tensor *t = &g->tensors[3];
    assert_int_equal(t->n_dims, 4);
    assert_int_equal(t->ne[0], 2); assert_int_equal(t->ne[1], 3); assert_int_equal(t->ne[2], 1); assert_int_equal(t->ne[3], 2);
    assert_memory_equal(g->tensors[0].data, f32_data, sizeof f32_data);
    assert_memory_equal(g->tensors[1].data, q4_data, sizeof q4_data);
    assert_memory_equal(g->tensors[3].data, f16_data, sizeof f16_data);
    const uint8_t *q8 = g->tensors[2].data;
    for (int i = 0; i < 5 * 34; i++) assert_int_equal(q8[i], (uint8_t)(9 + i * 7));
    assert_int_equal(g->tensors[2].ne[1], 5);
    assert_int_equal(g->tensors[0].ne[2], 1); /* unused dims are 1 */
    assert_null(nx_gguf_find_tensor(g, "missing"));
    assert_null(nx_gguf_find_kv(g, "missing"));
    assert_null(nx_gguf_find_kv(g, "t.u")); /* prefix is not a match */
}

static void roundtrip(uint32_t version, uint32_t alignment) {
    fill_ctx fc = {0, 9, false};
    nx_gguf_writer *w = sample_writer(&fc);
    nx_err err = {{0}};
    if (version) must(nx_gguf_writer_set_version(w, version, &err), &err);
    if (alignment) must(nx_gguf_add_u32(w, "general.alignment", alignment, &err), &err);
    const char *path = tu_tmp_path("rt.gguf");
    must(nx_gguf_writer_write(w, path, &err), &err);
    assert_int_equal(fc.calls, 1);
    nx_gguf_writer_free(w);
    nx_gguf *g = NULL;
    must(nx_gguf_open(&g, path, &err), &err);
    check_sample(g, version ? version : 3, alignment ? alignment : 32);

    /* re-write through add_kv_copy: identical bytes */
    w = nx_gguf_writer_new(&err);
    if (version) must(nx_gguf_writer_set_version(w, version, &err), &err);
    for (uint64_t i = 0; i < g->n_kv; i++) must(nx_gguf_add_kv_copy(w, &g->kv[i], &err), &err);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const nx_gguf_tensor *t = &g->tensors[i];
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        must(nx_gguf_add_tensor(w, name, t->type, t->n_dims, t->ne, t->data, &err), &err);
    }
    const char *path2 = tu_tmp_path("rt2.gguf");
    must(nx_gguf_writer_write(w, path2, &err), &err);
    nx_gguf_writer_free(w);
    size_t n1, n2;
    uint8_t *b1 = tu_read_file(path, &n1), *b2 = tu_read_file(path2, &n2);
    assert_non_null(b1); assert_non_null(b2);
    assert_int_equal(n1, n2);
    assert_memory_equal(b1, b2, n1);

    /* truncation at every byte boundary up to the end of the last tensor's data must fail
     * cleanly; beyond that (inside the final padding) the file is still complete */
    uint64_t min_valid = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++)
        min_valid = NX_MAX(min_valid, g->data_offset + g->tensors[i].offset + g->tensors[i].nbytes);
    for (size_t len = 0; len < n1; len++) {
        if (len < min_valid) {
            expect_fail_n(b1, len, NULL);
        } else {
            nx_gguf *h = NULL;
            must(nx_gguf_open_memory(&h, b1, len, "trunc.gguf", &err), &err);
            nx_gguf_close(h);
        }
    }
    free(b1); free(b2);
    nx_gguf_close(g);
    unlink(path); unlink(path2);
}

static void test_roundtrip_v3(void **state) { (void)state; roundtrip(0, 0); }
static void test_roundtrip_v2(void **state) { (void)state; roundtrip(2, 0); }
static void test_roundtrip_align64(void **state) { (void)state; roundtrip(3, 64); }
static void test_roundtrip_align1(void **state) { (void)state; roundtrip(3, 1); }

/* The writer's bytes, checked against the hand encoder (not against our own reader). */
static void test_writer_exact_bytes(void **state) {
    (void)state;
    nx_err err = {{0}};
    nx_gguf_writer *w = nx_gguf_writer_new(&err);
    must(nx_gguf_add_u32(w, "a.n", 7, &err), &err);
    const char *strs[] = {"x", "yz"};
    must(nx_gguf_add_arr_str(w, "a.s", strs, 2, &err), &err);
    const float v[3] = {1.0f, 2.0f, 3.0f};
    const uint64_t ne[] = {3};
    must(nx_gguf_add_tensor(w, "w", 0, 1, ne, v, &err), &err);
    const uint64_t ne2[] = {1};
    must(nx_gguf_add_tensor(w, "b", 0, 1, ne2, v, &err), &err);
    const char *path = tu_tmp_path("exact.gguf");
    must(nx_gguf_writer_write(w, path, &err), &err);
    nx_gguf_writer_free(w);

    tb e = {0};
    tb_header(&e, 3, 2, 2);
    tb_kv_u32(&e, "a.n", 7);
    tb_str(&e, "a.s"); tb_u32(&e, NX_GGUF_ARRAY); tb_u32(&e, NX_GGUF_STRING); tb_u64(&e, 2);
    tb_str(&e, "x"); tb_str(&e, "yz");
    const uint64_t e1[] = {3}, e2[] = {1};
    tb_tinfo(&e, "w", 1, e1, 0, 0);
    tb_tinfo(&e, "b", 1, e2, 0, 32);
    tb_pad(&e, 32);
    tb_put(&e, v, 12); tb_pad(&e, 32);
    tb_put(&e, v, 4); tb_pad(&e, 32);

    size_t n;
    uint8_t *got = tu_read_file(path, &n);
    assert_non_null(got);
    assert_int_equal(n, e.len);
    assert_memory_equal(got, e.p, n);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0644);
    free(got); free(e.p);
    unlink(path);
}

static void test_empty_files(void **state) {
    (void)state;
    nx_err err = {{0}};
    /* a writer with nothing: header only, padded */
    nx_gguf_writer *w = nx_gguf_writer_new(&err);
    const char *path = tu_tmp_path("empty.gguf");
    must(nx_gguf_writer_write(w, path, &err), &err);
    nx_gguf_writer_free(w);
    nx_gguf *g = NULL;
    must(nx_gguf_open(&g, path, &err), &err);
    assert_int_equal(g->n_kv, 0);
    assert_int_equal(g->n_tensors, 0);
    assert_int_equal(g->size, 32);
    assert_null(nx_gguf_find_kv(g, "x"));
    assert_null(nx_gguf_find_tensor(g, "x"));
    nx_gguf_close(g);

    /* the bare 24-byte header (no padding) is a complete file too */
    tb b = {0};
    tb_header(&b, 3, 0, 0);
    g = expect_ok(&b);
    assert_int_equal(g->data_offset, 24);
    nx_gguf_close(g);
    /* metadata only, no tensors, unpadded */
    b.len = 0;
    tb_header(&b, 2, 0, 1);
    tb_kv_u32(&b, "k", 1);
    g = expect_ok(&b);
    assert_int_equal(g->version, 2);
    nx_gguf_close(g);
    free(b.p);

    /* a 0-byte file and an empty buffer */
    FILE *f = fopen(path, "wb");
    fclose(f);
    assert_false(nx_gguf_open(&g, path, &err));
    assert_non_null(strstr(err.msg, "empty file"));
    assert_false(nx_gguf_open_memory(&g, NULL, 0, "mem", &err));
    assert_non_null(strstr(err.msg, "mem: not a GGUF file"));
    unlink(path);
    /* missing file and a directory */
    assert_false(nx_gguf_open(&g, "/nonexistent/x.gguf", &err));
    assert_non_null(strstr(err.msg, "/nonexistent/x.gguf: cannot open"));
    assert_false(nx_gguf_open(&g, "/tmp", &err));
    assert_non_null(strstr(err.msg, "not a regular file"));
}

/* Arrays of arrays: validated, exposed raw, copied intact; nesting depth is limited. */
static void nested(tb *b, int depth) {
    /* value payload (after the ARRAY type) of a `depth`-level array whose leaves are u32 */
    if (depth == 1) { tb_u32(b, NX_GGUF_UINT32); tb_u64(b, 2); tb_u32(b, 11); tb_u32(b, 22); return; }
    tb_u32(b, NX_GGUF_ARRAY); tb_u64(b, 1); nested(b, depth - 1);
}

static void test_nested_arrays(void **state) {
    (void)state;
    tb b = {0};
    tb_header(&b, 3, 0, 3);
    tb_str(&b, "n.ints"); tb_u32(&b, NX_GGUF_ARRAY);
    tb_u32(&b, NX_GGUF_ARRAY); tb_u64(&b, 2);
    tb_u32(&b, NX_GGUF_INT32); tb_u64(&b, 1); tb_u32(&b, (uint32_t)-4);
    tb_u32(&b, NX_GGUF_UINT8); tb_u64(&b, 3); tb_u8(&b, 1); tb_u8(&b, 2); tb_u8(&b, 3);
    tb_str(&b, "n.strs"); tb_u32(&b, NX_GGUF_ARRAY);
    tb_u32(&b, NX_GGUF_ARRAY); tb_u64(&b, 1);
    tb_u32(&b, NX_GGUF_STRING); tb_u64(&b, 2); tb_str(&b, "ab"); tb_str(&b, "");
    tb_str(&b, "n.deep"); tb_u32(&b, NX_GGUF_ARRAY); nested(&b, NX_GGUF_MAX_ARRAY_DEPTH);
    nx_gguf *g = expect_ok(&b);
    nx_err err = {{0}};
    const nx_gguf_kv *kv = nx_gguf_find_kv(g, "n.ints");
    assert_non_null(kv);
    assert_int_equal(kv->arr_type, NX_GGUF_ARRAY);
    assert_int_equal(kv->arr_count, 2);
    assert_int_equal(kv->arr_bytes, (4 + 8 + 4) + (4 + 8 + 3));
    const nx_gguf_kv *a;
    assert_false(nx_gguf_get_arr(g, "n.ints", NX_GGUF_INT32, &a, &err));
    assert_non_null(strstr(err.msg, "is an array of array"));
    must(nx_gguf_get_arr(g, "n.strs", NX_GGUF_ARRAY, &a, &err), &err);

    /* copy everything into a writer and compare the bytes with the hand-made original */
    nx_gguf_writer *w = nx_gguf_writer_new(&err);
    for (uint64_t i = 0; i < g->n_kv; i++) must(nx_gguf_add_kv_copy(w, &g->kv[i], &err), &err);
    const char *path = tu_tmp_path("nested.gguf");
    must(nx_gguf_writer_write(w, path, &err), &err);
    nx_gguf_writer_free(w);
    size_t n;
    uint8_t *got = tu_read_file(path, &n);
    tb_pad(&b, 32);
    assert_int_equal(n, b.len);
    assert_memory_equal(got, b.p, n);
    free(got);
    unlink(path);
    nx_gguf_close(g);

    b.len = 0;
    tb_header(&b, 3, 0, 1);
    tb_str(&b, "n.too_deep"); tb_u32(&b, NX_GGUF_ARRAY); nested(&b, NX_GGUF_MAX_ARRAY_DEPTH + 1);
    expect_fail(&b, "kv 0 'n.too_deep': arrays nested deeper than 8 levels");
    free(b.p);
}

/* ---- hand-made malformed files, one defect each -------------------------------------------- */

static void test_bad_header(void **state) {
    (void)state;
    tb b = {0};
    tb_put(&b, "GGML", 4); tb_u32(&b, 3); tb_u64(&b, 0); tb_u64(&b, 0);
    expect_fail(&b, "not a GGUF file (magic 'GGML'");
    b.len = 0; tb_header(&b, 1, 0, 0);
    expect_fail(&b, "version 1 is not supported");
    b.len = 0; tb_header(&b, 4, 0, 0);
    expect_fail(&b, "unsupported GGUF version 4");
    b.len = 0; tb_header(&b, 0x03000000u, 0, 0);
    expect_fail(&b, "byte-swapped");
    b.len = 0; tb_header(&b, 3, 0, (uint64_t)1 << 62);
    expect_fail(&b, "header claims 4611686018427387904 metadata entries and 0 tensors, which cannot fit in a file of 24 bytes");
    b.len = 0; tb_header(&b, 3, UINT64_MAX, 0);
    expect_fail(&b, "cannot fit");
    b.len = 0; tb_header(&b, 3, 1, 0); /* one tensor claimed but no room for its info */
    expect_fail(&b, "cannot fit");
    b.len = 0; tb_header(&b, 3, 0, 0);
    expect_fail_n(b.p, 23, "header metadata count needs 8 bytes at offset 16 but the file ends at 23");
    expect_fail_n(b.p, 3, "not a GGUF file");
    free(b.p);
}

static void test_bad_kv(void **state) {
    (void)state;
    tb b = {0};
    /* key length past EOF */
    tb_header(&b, 3, 0, 1); tb_u64(&b, 1000); tb_put(&b, "abcdefghijklmnopq", 17);
    expect_fail(&b, "kv 0: key length 1000 at offset 24 runs past end of file (size 49)");
    /* string value with an absurd length (would overflow pos + len) */
    b.len = 0; tb_header(&b, 3, 0, 1); tb_str(&b, "s"); tb_u32(&b, NX_GGUF_STRING); tb_u64(&b, UINT64_MAX);
    tb_zeros(&b, 8);
    expect_fail(&b, "kv 0 's': string value length 18446744073709551615");
    /* unknown value type */
    b.len = 0; tb_header(&b, 3, 0, 1); tb_str(&b, "t"); tb_u32(&b, 13); tb_zeros(&b, 8);
    expect_fail(&b, "kv 0 't': value type 13 is not a GGUF value type");
    /* unknown array element type */
    b.len = 0; tb_header(&b, 3, 0, 1); tb_str(&b, "a"); tb_u32(&b, NX_GGUF_ARRAY); tb_u32(&b, 99); tb_u64(&b, 0);
    tb_zeros(&b, 8);
    expect_fail(&b, "array element type 99");
    /* array count whose byte size overflows 64 bits */
    b.len = 0; tb_header(&b, 3, 0, 1); tb_str(&b, "a"); tb_u32(&b, NX_GGUF_ARRAY); tb_u32(&b, NX_GGUF_UINT32);
    tb_u64(&b, ((uint64_t)1 << 62) + 1); tb_zeros(&b, 16);
    expect_fail(&b, "array of 4611686018427387905 uint32");
    /* string array count that cannot fit */
    b.len = 0; tb_header(&b, 3, 0, 1); tb_str(&b, "a"); tb_u32(&b, NX_GGUF_ARRAY); tb_u32(&b, NX_GGUF_STRING);
    tb_u64(&b, 1000000); tb_zeros(&b, 16);
    expect_fail(&b, "string array count 1000000 cannot fit");
    /* string array element running past EOF */
    b.len = 0; tb_header(&b, 3, 0, 1); tb_str(&b, "a"); tb_u32(&b, NX_GGUF_ARRAY); tb_u32(&b, NX_GGUF_STRING);
    tb_u64(&b, 2); tb_str(&b, "ok"); tb_u64(&b, 5); tb_put(&b, "abcd", 4);
    expect_fail(&b, "string array element length 5");
    /* bool that is neither 0 nor 1, scalar and in an array */
    b.len = 0; tb_header(&b, 3, 0, 1); tb_str(&b, "b"); tb_u32(&b, NX_GGUF_BOOL); tb_u8(&b, 2);
    tb_zeros(&b, 8);
    expect_fail(&b, "kv 0 'b': bool value 2");
    b.len = 0; tb_header(&b, 3, 0, 1); tb_str(&b, "b"); tb_u32(&b, NX_GGUF_ARRAY); tb_u32(&b, NX_GGUF_BOOL);
    tb_u64(&b, 2); tb_u8(&b, 0); tb_u8(&b, 7);
    expect_fail(&b, "bool value 7");
    /* scalar value truncated */
    b.len = 0; tb_header(&b, 3, 0, 1); tb_str(&b, "abcdefghi"); tb_u32(&b, NX_GGUF_UINT64); tb_u32(&b, 1);
    expect_fail(&b, "kv 0 'abcdefghi': value needs 8 bytes");
    /* empty key, duplicate key */
    b.len = 0; tb_header(&b, 3, 0, 1); tb_str(&b, ""); tb_u32(&b, NX_GGUF_UINT8); tb_u8(&b, 0); tb_zeros(&b, 8);
    expect_fail(&b, "kv 0: empty key");
    b.len = 0; tb_header(&b, 3, 0, 3); tb_kv_u32(&b, "x", 1); tb_kv_u32(&b, "y", 1); tb_kv_u32(&b, "x", 2);
    expect_fail(&b, "duplicate key 'x' (entries 0 and 2)");
    /* non-printable key bytes are escaped in messages */
    b.len = 0; tb_header(&b, 3, 0, 1); tb_str(&b, "k\n\x01"); tb_u32(&b, 77); tb_zeros(&b, 8);
    expect_fail(&b, "kv 0 'k\\x0a\\x01': value type 77");
    /* alignment: zero, not a power of two, wrong type */
    b.len = 0; tb_header(&b, 3, 0, 1); tb_kv_u32(&b, "general.alignment", 0);
    expect_fail(&b, "general.alignment 0 is not a non-zero power of two");
    b.len = 0; tb_header(&b, 3, 0, 1); tb_kv_u32(&b, "general.alignment", 48);
    expect_fail(&b, "general.alignment 48 is not a non-zero power of two");
    b.len = 0; tb_header(&b, 3, 0, 1); tb_str(&b, "general.alignment"); tb_u32(&b, NX_GGUF_UINT64); tb_u64(&b, 64);
    expect_fail(&b, "key 'general.alignment' has type uint64, expected uint32");
    free(b.p);
}

/* A file with one tensor info and the given data-section length. */
static void one_tensor(tb *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t off,
                       size_t data_len) {
    b->len = 0;
    tb_header(b, 3, 1, 0);
    tb_tinfo(b, name, n_dims, ne, type, off);
    tb_pad(b, 32);
    tb_zeros(b, data_len);
}

static void test_bad_tensors(void **state) {
    (void)state;
    tb b = {0};
    const uint64_t ne[] = {32, 2, 1, 1, 1};
    one_tensor(&b, "w", 2, ne, 0, 0, 256);
    nx_gguf_close(expect_ok(&b));
    one_tensor(&b, "w", 5, ne, 0, 0, 256);
    expect_fail(&b, "tensor 'w': n_dims 5 exceeds the maximum 4");
    const uint64_t ne0[] = {32, 0};
    one_tensor(&b, "w", 2, ne0, 0, 0, 256);
    expect_fail(&b, "tensor 'w': dimension 1 has 0 elements");
    const uint64_t neg[] = {(uint64_t)-5};
    one_tensor(&b, "w", 1, neg, 0, 0, 256);
    expect_fail(&b, "dimension 0 has 18446744073709551611 elements");
    const uint64_t big[] = {(uint64_t)1 << 32, (uint64_t)1 << 32};
    one_tensor(&b, "w", 2, big, 0, 0, 256);
    expect_fail(&b, "tensor 'w': shape [4294967296, 4294967296, 1, 1] has more than 2^63-1 elements");
    const uint64_t huge[] = {(uint64_t)1 << 62};
    one_tensor(&b, "w", 1, huge, 28 /* f64 */, 0, 256);
    expect_fail(&b, "tensor 'w': byte size of 4611686018427387904 f64 elements overflows 64 bits");
    one_tensor(&b, "w", 2, ne, 4 /* removed Q4_2 */, 0, 256);
    expect_fail(&b, "tensor 'w': unknown ggml type 4");
    one_tensor(&b, "w", 2, ne, 1000, 0, 256);
    expect_fail(&b, "unknown ggml type 1000");
    const uint64_t ne33[] = {33, 2};
    one_tensor(&b, "w", 2, ne33, 2 /* q4_0 */, 0, 256);
    expect_fail(&b, "tensor 'w': row of 33 elements is not a multiple of the q4_0 block size 32");
    one_tensor(&b, "w", 2, ne, 0, 16, 256);
    expect_fail(&b, "tensor 'w' data offset 16 is not a multiple of the alignment 32");
    /* the brief's example message shape: absolute file range and file size */
    one_tensor(&b, "blk.3.ffn_up.weight", 2, ne, 0, 0, 255);
    expect_fail(&b, "tensor 'blk.3.ffn_up.weight' data [0x60, +256) runs past end of file (size 351)"); /* infos end at 83 -> 96 */
    one_tensor(&b, "w", 2, ne, 0, UINT64_MAX - 31, 256);
    expect_fail(&b, "runs past end of file");
    one_tensor(&b, "", 2, ne, 0, 0, 256);
    expect_fail(&b, "tensor 0: empty tensor name");
    /* tensor info truncated mid-dimension */
    one_tensor(&b, "w", 2, ne, 0, 0, 0);
    expect_fail_n(b.p, 24 + 8 + 1 + 4 + 8 + 3, "tensor 'w': dimension needs 8 bytes");
    /* data section start past EOF: infos end at 24+8+1+4+2*8+4+8 = 65, aligned 96 > 70 */
    expect_fail_n(b.p, 70, "data section would start at offset 96 (header end 65 aligned to 32), past end of file (size 70)");

    /* two tensors: overlapping ranges, duplicate names */
    const uint64_t ne8[] = {8};
    b.len = 0; tb_header(&b, 3, 2, 0);
    tb_tinfo(&b, "a", 1, ne8, 0, 32); tb_tinfo(&b, "b", 1, (const uint64_t[]){16}, 0, 0);
    tb_pad(&b, 32); tb_zeros(&b, 128);
    expect_fail(&b, "tensor 'b' data [0x60, +64) overlaps tensor 'a' data [0x80, +32)");
    b.len = 0; tb_header(&b, 3, 2, 0);
    tb_tinfo(&b, "a", 1, ne8, 0, 0); tb_tinfo(&b, "a", 1, ne8, 0, 32);
    tb_pad(&b, 32); tb_zeros(&b, 128);
    expect_fail(&b, "duplicate tensor name 'a' (entries 0 and 1)");
    /* same offset twice is an overlap too; distinct adjacent ranges and a gap are fine */
    b.len = 0; tb_header(&b, 3, 2, 0);
    tb_tinfo(&b, "a", 1, ne8, 0, 0); tb_tinfo(&b, "b", 1, ne8, 0, 0);
    tb_pad(&b, 32); tb_zeros(&b, 128);
    expect_fail(&b, "overlaps");
    b.len = 0; tb_header(&b, 3, 2, 0);
    tb_tinfo(&b, "a", 1, ne8, 0, 96); tb_tinfo(&b, "b", 1, ne8, 0, 0);
    tb_pad(&b, 32); tb_zeros(&b, 128);
    nx_gguf *g = expect_ok(&b);
    assert_int_equal(g->tensors[0].offset, 96);
    nx_gguf_close(g);
    /* a type nextn cannot compute with (iq2_xxs) still opens: sizes are known */
    const uint64_t ne256[] = {256, 2};
    one_tensor(&b, "iq", 2, ne256, 16, 0, 132);
    g = expect_ok(&b);
    assert_int_equal(g->tensors[0].nbytes, 132);
    nx_gguf_close(g);
    /* n_dims 0 is a scalar */
    one_tensor(&b, "s", 0, ne, 0, 0, 4);
    g = expect_ok(&b);
    assert_int_equal(g->tensors[0].nbytes, 4);
    nx_gguf_close(g);
    free(b.p);
}

/* ---- getters -------------------------------------------------------------------------------- */

static void test_getters(void **state) {
    (void)state;
    tb b = {0};
    tb_header(&b, 3, 0, 9);
    tb_kv_u32(&b, "u32", 4000000000u);
    tb_str(&b, "neg"); tb_u32(&b, NX_GGUF_INT32); tb_u32(&b, (uint32_t)-7);
    tb_str(&b, "u8"); tb_u32(&b, NX_GGUF_UINT8); tb_u8(&b, 9);
    tb_str(&b, "big"); tb_u32(&b, NX_GGUF_UINT64); tb_u64(&b, (uint64_t)1 << 40);
    tb_str(&b, "f64"); tb_u32(&b, NX_GGUF_FLOAT64); { double d = 1e300; tb_put(&b, &d, 8); }
    tb_str(&b, "f32"); tb_u32(&b, NX_GGUF_FLOAT32); { float f = 0.25f; tb_put(&b, &f, 4); }
    tb_str(&b, "s"); tb_u32(&b, NX_GGUF_STRING); tb_str(&b, "text");
    tb_str(&b, "bl"); tb_u32(&b, NX_GGUF_BOOL); tb_u8(&b, 0);
    tb_str(&b, "arr"); tb_u32(&b, NX_GGUF_ARRAY); tb_u32(&b, NX_GGUF_UINT32); tb_u64(&b, 2); tb_u32(&b, 5); tb_u32(&b, 300);
    nx_gguf *g = expect_ok(&b);
    nx_err err = {{0}};
    uint32_t u; int32_t i; uint64_t u64; float f; bool bo; nx_str s; const nx_gguf_kv *a;
    must(nx_gguf_get_u32(g, "u32", &u, &err), &err); assert_int_equal(u, 4000000000u);
    must(nx_gguf_get_u32(g, "u8", &u, &err), &err); assert_int_equal(u, 9);
    assert_false(nx_gguf_get_u32(g, "neg", &u, &err));
    assert_string_equal(err.msg, "ok.gguf: key 'neg' value -7 is out of range for uint32");
    assert_false(nx_gguf_get_u32(g, "big", &u, &err));
    assert_non_null(strstr(err.msg, "value 1099511627776 is out of range for uint32"));
    assert_false(nx_gguf_get_u32(g, "nope", &u, &err));
    assert_string_equal(err.msg, "ok.gguf: required key 'nope' is missing");
    must(nx_gguf_get_u32_or(g, "nope", 17, &u, &err), &err); assert_int_equal(u, 17);
    assert_false(nx_gguf_get_u32(g, "s", &u, &err));
    assert_non_null(strstr(err.msg, "key 's' has type string, expected an integer"));
    must(nx_gguf_get_i32_or(g, "neg", 0, &i, &err), &err); assert_int_equal(i, -7);
    assert_false(nx_gguf_get_i32_or(g, "u32", 0, &i, &err));
    must(nx_gguf_get_u64_or(g, "big", 0, &u64, &err), &err); assert_true(u64 == (uint64_t)1 << 40);
    assert_false(nx_gguf_get_u64_or(g, "neg", 0, &u64, &err));
    must(nx_gguf_get_f32(g, "f32", &f, &err), &err); assert_true(f == 0.25f);
    assert_false(nx_gguf_get_f32(g, "f64", &f, &err));
    assert_non_null(strstr(err.msg, "out of range for float32"));
    assert_false(nx_gguf_get_f32(g, "u8", &f, &err));
    must(nx_gguf_get_f32_or(g, "nope", 1.5f, &f, &err), &err); assert_true(f == 1.5f);
    must(nx_gguf_get_bool_or(g, "bl", true, &bo, &err), &err); assert_false(bo);
    assert_false(nx_gguf_get_bool_or(g, "u8", true, &bo, &err));
    must(nx_gguf_get_str(g, "s", &s, &err), &err); assert_true(nx_str_eq(s, "text"));
    must(nx_gguf_get_str_or(g, "nope", "dflt", &s, &err), &err); assert_true(nx_str_eq(s, "dflt"));
    assert_false(nx_gguf_get_str(g, "u8", &s, &err));
    /* integer arrays convert when every element fits */
    must(nx_gguf_get_arr(g, "arr", NX_GGUF_INT64, &a, &err), &err); assert_int_equal(nx_gguf_arr_int(a, 1), 300);
    must(nx_gguf_get_arr(g, "arr", NX_GGUF_INT16, &a, &err), &err);
    assert_false(nx_gguf_get_arr(g, "arr", NX_GGUF_UINT8, &a, &err));
    assert_string_equal(err.msg, "ok.gguf: key 'arr' element 1 value 300 is out of range for uint8");
    assert_false(nx_gguf_get_arr(g, "arr", NX_GGUF_STRING, &a, &err));
    assert_false(nx_gguf_get_arr(g, "u8", NX_GGUF_UINT8, &a, &err));
    assert_false(nx_gguf_get_arr(g, "nope", NX_GGUF_UINT8, &a, &err));
    assert_true(nx_gguf_arr_str(a ? a : nx_gguf_find_kv(g, "arr"), 0).len == 0); /* not a string array */
    assert_string_equal(nx_gguf_vtype_name(NX_GGUF_FLOAT64), "float64");
    assert_string_equal(nx_gguf_vtype_name((nx_gguf_vtype)99), "unknown");
    nx_gguf_close(g);
    free(b.p);
}

/* ---- writer errors ---------------------------------------------------------------------------- */

static void test_writer_errors(void **state) {
    (void)state;
    nx_err err = {{0}};
    nx_gguf_writer *w = nx_gguf_writer_new(&err);
    must(nx_gguf_add_u32(w, "k", 1, &err), &err);
    assert_false(nx_gguf_add_str(w, "k", "x", &err));
    assert_string_equal(err.msg, "gguf writer: duplicate key 'k'");
    assert_false(nx_gguf_add_u32(w, "", 1, &err));
    assert_false(nx_gguf_add_u64(w, "general.alignment", 64, &err));
    assert_non_null(strstr(err.msg, "general.alignment must be uint32"));
    assert_false(nx_gguf_add_u32(w, "general.alignment", 24, &err));
    assert_non_null(strstr(err.msg, "24 is not a non-zero power of two"));
    assert_false(nx_gguf_writer_set_version(w, 1, &err));
    const uint8_t bad_bool[] = {0, 2};
    assert_false(nx_gguf_add_arr(w, "bb", NX_GGUF_BOOL, bad_bool, 2, &err));
    assert_false(nx_gguf_add_arr(w, "ss", NX_GGUF_STRING, bad_bool, 2, &err));
    const char *with_null[] = {"a", NULL};
    assert_false(nx_gguf_add_arr_str(w, "sn", with_null, 2, &err));
    float v[64] = {0};
    const uint64_t ne[] = {64};
    must(nx_gguf_add_tensor(w, "t", 0, 1, ne, v, &err), &err);
    assert_false(nx_gguf_add_tensor(w, "t", 0, 1, ne, v, &err));
    assert_string_equal(err.msg, "gguf writer: duplicate tensor name 't'");
    char long_name[65];
    memset(long_name, 'x', 64); long_name[64] = '\0';
    assert_false(nx_gguf_add_tensor(w, long_name, 0, 1, ne, v, &err));
    assert_non_null(strstr(err.msg, "is 64 bytes, llama.cpp allows at most 63"));
    const uint64_t ne33[] = {33};
    assert_false(nx_gguf_add_tensor(w, "q", 2, 1, ne33, v, &err));
    assert_non_null(strstr(err.msg, "row of 33 elements is not a multiple of the q4_0 block size 32"));
    assert_false(nx_gguf_add_tensor(w, "u", 5, 1, ne, v, &err));
    assert_false(nx_gguf_add_tensor(w, "z", 0, 0, ne, v, &err));
    const uint64_t zero[] = {0};
    assert_false(nx_gguf_add_tensor(w, "z", 0, 1, zero, v, &err));
    assert_false(nx_gguf_add_tensor(w, "n", 0, 1, ne, NULL, &err));

    /* a failing fill callback: error names the file and tensor; nothing is left behind */
    fill_ctx fc = {0, 0, true};
    const uint64_t ne_q8[] = {32};
    must(nx_gguf_add_tensor_fn(w, "cb", 8, 1, ne_q8, fill_q8, &fc, &err), &err);
    char dir[512];
    snprintf(dir, sizeof dir, "%s", tu_tmp_path("wdir"));
    assert_int_equal(mkdir(dir, 0700), 0);
    char path[600];
    snprintf(path, sizeof path, "%s/out.gguf", dir);
    assert_false(nx_gguf_writer_write(w, path, &err));
    assert_non_null(strstr(err.msg, "out.gguf: tensor 'cb': synthetic fill failure"));
    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(rmdir(dir), 0); /* fails if a temporary file was left in it */
    snprintf(path, sizeof path, "%s/missing/out.gguf", dir);
    fc.fail = false;
    assert_false(nx_gguf_writer_write(w, path, &err));
    assert_non_null(strstr(err.msg, "cannot create temporary file"));
    nx_gguf_writer_free(w);
}

/* ---- random mutations of a valid file -------------------------------------------------------- */

static void test_mutations(void **state) {
    (void)state;
    fill_ctx fc = {0, 3, false};
    nx_gguf_writer *w = sample_writer(&fc);
    nx_err err = {{0}};
    const char *path = tu_tmp_path("mut.gguf");
    must(nx_gguf_writer_write(w, path, &err), &err);
    nx_gguf_writer_free(w);
    size_t n;
    uint8_t *orig = tu_read_file(path, &n);
    unlink(path);
    nx_gguf *g0 = NULL;
    must(nx_gguf_open_memory(&g0, orig, n, "m", &err), &err);
    size_t header = (size_t)g0->data_offset;
    nx_gguf_close(g0);
    uint8_t *buf = malloc(n);
    tu_rng rng;
    tu_rng_seed(&rng, 42);
    int failures = 0, successes = 0;
    static const uint64_t interesting[] = {0, 1, 2, 0x7f, 0xff, 0xffff, 0xffffffffu, 0x80000000u, 31, 32, 33, 255};
    for (int iter = 0; iter < 3000; iter++) {
        memcpy(buf, orig, n);
        int edits = 1 + (int)(tu_rng_u64(&rng) % 3);
        for (int e = 0; e < edits; e++) {
            size_t at = (size_t)(tu_rng_u64(&rng) % header);
            switch (tu_rng_u64(&rng) % 3) {
            case 0: buf[at] ^= (uint8_t)(1u << (tu_rng_u64(&rng) % 8)); break;
            case 1: buf[at] = (uint8_t)tu_rng_u64(&rng); break;
            default: { /* overwrite a 4- or 8-byte field with an interesting value */
                uint64_t v = interesting[tu_rng_u64(&rng) % NX_ARRAY_LEN(interesting)];
                size_t w8 = tu_rng_u64(&rng) % 2 ? 8 : 4;
                if (at + w8 <= header) memcpy(buf + at, &v, w8);
            }
            }
        }
        size_t len = tu_rng_u64(&rng) % 4 ? n : (size_t)(tu_rng_u64(&rng) % n);
        uint8_t *copy = malloc(len ? len : 1);
        memcpy(copy, buf, len);
        nx_gguf *g = NULL;
        err.msg[0] = '\0';
        if (nx_gguf_open_memory(&g, copy, len, "mut.gguf", &err)) {
            walk(g);
            nx_gguf_close(g);
            successes++;
        } else {
            assert_null(g);
            if (strncmp(err.msg, "mut.gguf: ", 10) != 0) fail_msg("bad message '%s'", err.msg);
            failures++;
        }
        free(copy);
    }
    /* both outcomes occur (e.g. edits inside string bytes keep the file valid) */
    assert_true(failures > 100);
    assert_true(successes > 10);
    free(buf);
    free(orig);
}

/* The gguf layout table covers every ggml id; wherever quant.c's compute table also describes an
 * id, both must agree (two tables, one truth).  Spot values are ggml's static_asserts. */
static void test_layouts(void **state) {
    (void)state;
    int both = 0;
    for (uint32_t t = 0; t < 64; t++) {
        const nx_gguf_type_layout *l = nx_gguf_type_layout_get(t);
        const nx_type_traits *q = nx_type_get(t);
        if (!q) continue;
        if (!l) fail_msg("type %u is in quant.c but not in the gguf layout table", t);
        if (strcmp(l->name, q->name) != 0 || (int64_t)l->block_size != q->block_size || l->type_size != q->type_size)
            fail_msg("type %u: gguf %s %u/%u vs quant %s %lld/%zu", t, l->name, l->block_size, l->type_size, q->name,
                     (long long)q->block_size, q->type_size);
        both++;
    }
    assert_true(both >= 20);
    const struct { uint32_t id; uint32_t bs, ts; } spot[] = {
        {2, 32, 18}, {12, 256, 144}, {14, 256, 210}, {16, 256, 66}, {23, 256, 136}, {29, 256, 56},
        {30, 1, 2}, {34, 256, 54}, {39, 32, 17},
    };
    for (size_t i = 0; i < NX_ARRAY_LEN(spot); i++) {
        const nx_gguf_type_layout *l = nx_gguf_type_layout_get(spot[i].id);
        assert_non_null(l);
        assert_int_equal(l->block_size, spot[i].bs);
        assert_int_equal(l->type_size, spot[i].ts);
    }
    const uint32_t removed[] = {4, 5, 31, 32, 33, 36, 37, 38, 43, 1000, UINT32_MAX};
    for (size_t i = 0; i < NX_ARRAY_LEN(removed); i++) assert_null(nx_gguf_type_layout_get(removed[i]));
}

/* ---- llama.cpp-written fixture (tests/fixtures/README.md) -------------------------------------- */
static void test_fixture_llama_gguf_example(void **state) {
    (void)state;
    nx_gguf *g = NULL;
    nx_err err = {{0}};
    must(nx_gguf_open(&g, tu_src_path("tests/fixtures/gguf/llama-gguf-example.gguf"), &err), &err);
    walk(g);
    assert_int_equal(g->version, 3);
    assert_int_equal(g->alignment, 32);
    assert_int_equal(g->data_offset, 1216);
    assert_int_equal(g->n_kv, 15);
    const nx_gguf_kv *kv;
    assert_non_null(kv = nx_gguf_find_kv(g, "some.parameter.uint8"));  assert_int_equal(kv->type, NX_GGUF_UINT8);  assert_int_equal(kv->v.u64, 0x12);
    assert_non_null(kv = nx_gguf_find_kv(g, "some.parameter.int8"));   assert_int_equal(kv->type, NX_GGUF_INT8);   assert_int_equal(kv->v.i64, -0x13);
    assert_non_null(kv = nx_gguf_find_kv(g, "some.parameter.uint16")); assert_int_equal(kv->type, NX_GGUF_UINT16); assert_int_equal(kv->v.u64, 0x1234);
    assert_non_null(kv = nx_gguf_find_kv(g, "some.parameter.int16"));  assert_int_equal(kv->type, NX_GGUF_INT16);  assert_int_equal(kv->v.i64, -0x1235);
    assert_non_null(kv = nx_gguf_find_kv(g, "some.parameter.uint32")); assert_int_equal(kv->type, NX_GGUF_UINT32); assert_int_equal(kv->v.u64, 0x12345678);
    assert_non_null(kv = nx_gguf_find_kv(g, "some.parameter.int32"));  assert_int_equal(kv->type, NX_GGUF_INT32);  assert_int_equal(kv->v.i64, -0x12345679);
    assert_non_null(kv = nx_gguf_find_kv(g, "some.parameter.float32")); assert_true(kv->v.f64 == (double)0.123456789f);
    assert_non_null(kv = nx_gguf_find_kv(g, "some.parameter.uint64")); assert_true(kv->v.u64 == 0x123456789abcdef0ull);
    assert_non_null(kv = nx_gguf_find_kv(g, "some.parameter.int64"));  assert_true(kv->v.i64 == -0x123456789abcdef1ll);
    assert_non_null(kv = nx_gguf_find_kv(g, "some.parameter.float64")); assert_true(kv->v.f64 == 0.1234567890123456789);
    assert_non_null(kv = nx_gguf_find_kv(g, "some.parameter.bool"));   assert_int_equal(kv->type, NX_GGUF_BOOL); assert_true(kv->v.b);
    nx_str s;
    must(nx_gguf_get_str(g, "some.parameter.string", &s, &err), &err);
    assert_true(nx_str_eq(s, "hello world"));
    const nx_gguf_kv *a;
    must(nx_gguf_get_arr(g, "some.parameter.arr.i16", NX_GGUF_INT16, &a, &err), &err);
    assert_int_equal(a->arr_count, 4);
    for (int i = 0; i < 4; i++) assert_int_equal(nx_gguf_arr_int(a, (uint64_t)i), i + 1);
    must(nx_gguf_get_arr(g, "some.parameter.arr.f32", NX_GGUF_FLOAT32, &a, &err), &err);
    assert_true(nx_gguf_arr_f64(a, 0) == (double)3.145f && nx_gguf_arr_f64(a, 2) == (double)1.414f);
    must(nx_gguf_get_arr(g, "some.parameter.arr.str", NX_GGUF_STRING, &a, &err), &err);
    assert_true(nx_str_eq(nx_gguf_arr_str(a, 0), "hello") && nx_str_eq(nx_gguf_arr_str(a, 1), "world") &&
                nx_str_eq(nx_gguf_arr_str(a, 2), "!"));
    static const uint64_t size[10] = {3024, 20, 6720, 24, 360, 48, 12, 200, 4, 1792};
    static const uint64_t off[10] = {0, 3040, 3072, 9792, 9824, 10208, 10272, 10304, 10528, 10560};
    static const uint64_t ne[10][4] = {{4, 7, 9, 3}, {5, 1, 1, 1}, {6, 4, 10, 7}, {3, 2, 1, 1}, {9, 10, 1, 1},
                                       {1, 6, 2, 1}, {3, 1, 1, 1}, {1, 10, 1, 5}, {1, 1, 1, 1}, {2, 8, 7, 4}};
    assert_int_equal(g->n_tensors, 10);
    for (int i = 0; i < 10; i++) {
        const nx_gguf_tensor *t = &g->tensors[i];
        char name[16];
        snprintf(name, sizeof name, "tensor_%d", i);
        assert_true(nx_str_eq(t->name, name));
        assert_int_equal(t->type, 0);
        assert_int_equal(t->nbytes, size[i]);
        assert_int_equal(t->offset, off[i]);
        for (int d = 0; d < 4; d++) assert_int_equal(t->ne[d], ne[i][d]);
        /* the program fills tensor i with the value 100 + i */
        const float *f = t->data;
        for (uint64_t j = 0; j < t->nbytes / 4; j++) assert_true(f[j] == 100.0f + (float)i);
    }
    nx_gguf_close(g);
}

/* A file larger than the writer's 8 MiB staging buffer and not a multiple of the 4096-byte
 * O_DIRECT block: full aligned flushes, then a partial final write after switching back to
 * buffered mode.  Every byte must round-trip, from both a borrowed pointer and a fill callback. */
static bool fill_pattern(void *user, void *dst, uint64_t nbytes, nx_err *err) {
    (void)err;
    uint8_t *d = dst;
    uint32_t seed = *(uint32_t *)user;
    for (uint64_t i = 0; i < nbytes; i++) d[i] = (uint8_t)((i * 2654435761u + seed) >> 13);
    return true;
}

static void test_large_file_roundtrip(void **state) {
    (void)state;
    nx_err err = {{0}};
    const uint64_t ne_a[1] = {2500001};        /* 10000004 bytes of f32 */
    const uint64_t ne_b[2] = {4096, 1111};     /* 4550656 bytes of i8, filled by callback */
    float *a = malloc(ne_a[0] * sizeof(float));
    assert_non_null(a);
    for (uint64_t i = 0; i < ne_a[0]; i++) a[i] = (float)i * 0.5f - 7.0f;
    uint32_t seed = 12345;
    nx_gguf_writer *w = nx_gguf_writer_new(&err);
    assert_non_null(w);
    must(nx_gguf_add_str(w, "general.name", "large", &err), &err);
    must(nx_gguf_add_tensor(w, "a", NX_TYPE_F32, 1, ne_a, a, &err), &err);
    must(nx_gguf_add_tensor_fn(w, "b", NX_TYPE_I8, 2, ne_b, fill_pattern, &seed, &err), &err);
    const char *path = tu_tmp_path("large.gguf");
    must(nx_gguf_writer_write(w, path, &err), &err);
    nx_gguf_writer_free(w);
    nx_gguf *g = NULL;
    must(nx_gguf_open(&g, path, &err), &err);
    const nx_gguf_tensor *t_a = nx_gguf_find_tensor(g, "a"), *t_b = nx_gguf_find_tensor(g, "b");
    assert_non_null(t_a);
    assert_non_null(t_b);
    assert_memory_equal(t_a->data, a, ne_a[0] * sizeof(float));
    uint8_t *expect = malloc(t_b->nbytes);
    assert_non_null(expect);
    fill_pattern(&seed, expect, t_b->nbytes, NULL);
    assert_memory_equal(t_b->data, expect, t_b->nbytes);
    assert_int_equal(g->size % 4096 != 0, 1); /* the partial-final-write path was taken */
    nx_gguf_close(g);
    unlink(path);
    free(expect);
    free(a);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_v3),
        cmocka_unit_test(test_roundtrip_v2),
        cmocka_unit_test(test_roundtrip_align64),
        cmocka_unit_test(test_roundtrip_align1),
        cmocka_unit_test(test_writer_exact_bytes),
        cmocka_unit_test(test_empty_files),
        cmocka_unit_test(test_nested_arrays),
        cmocka_unit_test(test_bad_header),
        cmocka_unit_test(test_bad_kv),
        cmocka_unit_test(test_bad_tensors),
        cmocka_unit_test(test_getters),
        cmocka_unit_test(test_writer_errors),
        cmocka_unit_test(test_mutations),
        cmocka_unit_test(test_layouts),
        cmocka_unit_test(test_fixture_llama_gguf_example),
        cmocka_unit_test(test_large_file_roundtrip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
