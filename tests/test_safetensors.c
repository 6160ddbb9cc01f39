/* test_safetensors.c - the safetensors reader: values, order, sharding, and malformed inputs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "convert/safetensors.h"
#include "testutil.h"

/* Builds a file image: u64 header length, header JSON, data bytes. */
static uint8_t *make_image(const char *header, const void *data, size_t dlen, size_t *len) {
    size_t h = strlen(header);
    *len = 8 + h + dlen;
    uint8_t *b = malloc(*len);
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)h >> (8 * i));
    memcpy(b + 8, header, h);
    if (dlen) memcpy(b + 8 + h, data, dlen);
    return b;
}

static void write_file(const char *path, const void *buf, size_t len) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, len, f), len);
    fclose(f);
}

/* Expects open_memory to fail with a message containing `needle`. */
static void expect_fail(const char *header, const void *data, size_t dlen, const char *needle) {
    size_t len;
    uint8_t *img = make_image(header, data, dlen, &len);
    nx_safetensors *st = NULL;
    nx_err err = {{0}};
    bool ok = nx_st_open_memory(&st, img, len, "bad.safetensors", &err);
    if (ok || !strstr(err.msg, needle)) {
        fprintf(stderr, "header %s: ok=%d msg='%s' (wanted '%s')\n", header, ok, err.msg, needle);
        fail();
    }
    assert_null(st);
    free(img);
}

static void test_values_and_order(void **state) {
    (void)state;
    /* b: F32 [2] at 0..8, a: F16 [3] at 8..14, c: BF16 [1,2] at 14..18 */
    uint8_t data[18];
    float f32[2] = {1.5f, -2.25f};
    uint16_t f16[3] = {0x3c00 /* 1 */, 0x0001 /* smallest subnormal */, 0xfc00 /* -inf */};
    uint16_t bf16[2] = {0x4049 /* 3.140625 */, 0xc000 /* -2 */};
    memcpy(data, f32, 8);
    memcpy(data + 8, f16, 6);
    memcpy(data + 14, bf16, 4);
    const char *hdr = "{\"__metadata__\":{\"format\":\"pt\"},"
                      "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                      "\"a\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[8,14]},"
                      "\"c\":{\"dtype\":\"BF16\",\"shape\":[1,2],\"data_offsets\":[14,18]}}";
    size_t len;
    uint8_t *img = make_image(hdr, data, sizeof data, &len);
    nx_safetensors *st;
    nx_err err;
    assert_true(nx_st_open_memory(&st, img, len, "t", &err));
    assert_int_equal(nx_st_count(st), 3);
    /* checkpoint order = sorted by name within the file */
    assert_string_equal(nx_st_get(st, 0)->name, "a");
    assert_string_equal(nx_st_get(st, 1)->name, "b");
    assert_string_equal(nx_st_get(st, 2)->name, "c");
    assert_null(nx_st_get(st, 3));
    assert_int_equal(nx_st_total_bytes(st), 18);
    float out[3];
    const nx_st_tensor *t = nx_st_find(st, "b");
    assert_non_null(t);
    assert_true(nx_st_read_f32(t, 0, 2, out, &err));
    assert_true(out[0] == 1.5f && out[1] == -2.25f);
    t = nx_st_find(st, "a");
    assert_true(nx_st_read_f32(t, 0, 3, out, &err));
    assert_true(out[0] == 1.0f);
    assert_true(out[1] == 5.9604644775390625e-08f);
    assert_true(out[2] < -1e38f && out[2] * 0 != 0);
    t = nx_st_find(st, "c");
    assert_int_equal(t->n_dims, 2);
    assert_int_equal(t->shape[0], 1);
    assert_int_equal(t->shape[1], 2);
    assert_true(nx_st_read_f32(t, 1, 1, out, &err));
    assert_true(out[0] == -2.0f);
    assert_false(nx_st_read_f32(t, 1, 2, out, &err));
    assert_non_null(strstr(err.msg, "out of range"));
    assert_null(nx_st_find(st, "zz"));
    nx_st_close(st);
    free(img);
}

static void test_all_f16_exact(void **state) {
    (void)state;
    /* Every finite half converts exactly: check against the arithmetic definition. */
    uint16_t *h = malloc(65536 * 2);
    for (uint32_t i = 0; i < 65536; i++) h[i] = (uint16_t)i;
    char hdr[128];
    snprintf(hdr, sizeof hdr, "{\"h\":{\"dtype\":\"F16\",\"shape\":[65536],\"data_offsets\":[0,131072]}}");
    size_t len;
    uint8_t *img = make_image(hdr, h, 131072, &len);
    nx_safetensors *st;
    nx_err err;
    assert_true(nx_st_open_memory(&st, img, len, "t", &err));
    float *f = malloc(65536 * sizeof *f);
    assert_true(nx_st_read_f32(nx_st_find(st, "h"), 0, 65536, f, &err));
    for (uint32_t i = 0; i < 65536; i++) {
        int e = (i >> 10) & 0x1f, m = i & 0x3ff;
        double s = (i & 0x8000) ? -1 : 1;
        if (e == 0x1f) continue; /* inf/nan checked above */
        double want = e == 0 ? s * m * 0x1p-24 : s * (1024 + m) * ldexp(1.0, e - 25);
        if ((double)f[i] != want) { fprintf(stderr, "half %04x -> %g want %g\n", i, f[i], want); fail(); }
    }
    free(f);
    nx_st_close(st);
    free(img);
    free(h);
}

static void test_malformed(void **state) {
    (void)state;
    uint8_t data[16] = {0};
    expect_fail("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}", data, 8, "not valid JSON");
    expect_fail("[1,2]", data, 0, "not a JSON object");
    expect_fail("{\"x\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", data, 8, "outside the data section");
    expect_fail("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,4]}}", data, 8, "outside the data section");
    expect_fail("{\"x\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", data, 16, "needs 12");
    expect_fail("{\"x\":{\"dtype\":\"Q4\",\"shape\":[2],\"data_offsets\":[0,8]}}", data, 8, "unknown dtype 'Q4'");
    expect_fail("{\"x\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", data, 8, "shape[0]");
    expect_fail("{\"x\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,8]}}", data, 8, "shape[0]");
    expect_fail("{\"x\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,8]}}",
                data, 8, "overflows");
    expect_fail("{\"x\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", data, 8, "dimensions");
    expect_fail("{\"x\":{\"shape\":[2],\"data_offsets\":[0,8]}}", data, 8, "'dtype'");
    expect_fail("{\"x\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", data, 8, "'shape'");
    expect_fail("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", data, 8, "data_offsets");
    expect_fail("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                "\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", data, 16, "appears twice");
    expect_fail("{\"x\":3}", data, 0, "not an object");

    /* header length larger than the file, and a file shorter than 8 bytes */
    size_t len;
    uint8_t *img = make_image("{}", NULL, 0, &len);
    img[0] = 200;
    nx_safetensors *st = NULL;
    nx_err err;
    assert_false(nx_st_open_memory(&st, img, len, "trunc.safetensors", &err));
    assert_non_null(strstr(err.msg, "truncated header"));
    assert_false(nx_st_open_memory(&st, img, 5, "tiny.safetensors", &err));
    assert_non_null(strstr(err.msg, "too small"));
    img[0] = 0; img[7] = 1; /* 2^56 */
    assert_false(nx_st_open_memory(&st, img, len, "huge.safetensors", &err));
    assert_non_null(strstr(err.msg, "exceeds the limit"));
    free(img);

    /* a known but non-float dtype opens, but cannot be read as float */
    img = make_image("{\"i\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}}", data, 8, &len);
    assert_true(nx_st_open_memory(&st, img, len, "t", &err));
    float f;
    assert_false(nx_st_read_f32(nx_st_find(st, "i"), 0, 1, &f, &err));
    assert_non_null(strstr(err.msg, "I64"));
    nx_st_close(st);
    free(img);
}

/* ---- files and sharded folders --------------------------------------------------------- */

static const char *mkdir_tmp(const char *tag) {
    const char *d = tu_tmp_path(tag);
    assert_int_equal(mkdir(d, 0755), 0);
    return d;
}

static void put(const char *dir, const char *name, const char *text) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    write_file(p, text, strlen(text));
}

static void put_st(const char *dir, const char *name, const char *tname, float v) {
    char hdr[256];
    snprintf(hdr, sizeof hdr, "{\"%s\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", tname);
    size_t len;
    uint8_t *img = make_image(hdr, &v, 4, &len);
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    write_file(p, img, len);
    free(img);
}

static void rm_rf(const char *dir) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

static void test_sharded(void **state) {
    (void)state;
    const char *d = mkdir_tmp("shards");
    char dir[512];
    snprintf(dir, sizeof dir, "%s", d);
    put_st(dir, "model-00002-of-00002.safetensors", "a.weight", 2.0f);
    put_st(dir, "model-00001-of-00002.safetensors", "z.weight", 1.0f);
    put(dir, "model.safetensors.index.json",
        "{\"metadata\":{},\"weight_map\":{\"a.weight\":\"model-00002-of-00002.safetensors\","
        "\"z.weight\":\"model-00001-of-00002.safetensors\"}}");
    nx_safetensors *st;
    nx_err err;
    assert_true(nx_st_open_dir(&st, dir, &err));
    assert_int_equal(nx_st_count(st), 2);
    /* shard order first (sorted file names), then names */
    assert_string_equal(nx_st_get(st, 0)->name, "z.weight");
    assert_string_equal(nx_st_get(st, 1)->name, "a.weight");
    float v;
    assert_true(nx_st_read_f32(nx_st_find(st, "a.weight"), 0, 1, &v, &err));
    assert_true(v == 2.0f);
    assert_non_null(strstr(nx_st_shard_path(st, 1), "model-00002-of-00002.safetensors"));
    nx_st_close(st);

    /* index names a tensor that its shard does not hold */
    put(dir, "model.safetensors.index.json",
        "{\"weight_map\":{\"a.weight\":\"model-00002-of-00002.safetensors\","
        "\"z.weight\":\"model-00001-of-00002.safetensors\",\"q.weight\":\"model-00001-of-00002.safetensors\"}}");
    assert_false(nx_st_open_dir(&st, dir, &err));
    assert_non_null(strstr(err.msg, "'q.weight'"));
    /* tensor listed under the wrong shard */
    put(dir, "model.safetensors.index.json",
        "{\"weight_map\":{\"a.weight\":\"model-00001-of-00002.safetensors\","
        "\"z.weight\":\"model-00002-of-00002.safetensors\"}}");
    assert_false(nx_st_open_dir(&st, dir, &err));
    assert_non_null(strstr(err.msg, "found in"));
    /* shard holds a tensor the index does not list */
    {
        float two[2] = {1, 2};
        size_t len;
        uint8_t *img = make_image("{\"a.weight\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                                  "\"extra\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                                  two, 8, &len);
        char p[600];
        snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", dir);
        write_file(p, img, len);
        free(img);
    }
    put(dir, "model.safetensors.index.json",
        "{\"weight_map\":{\"a.weight\":\"model-00002-of-00002.safetensors\"}}");
    assert_false(nx_st_open_dir(&st, dir, &err));
    assert_non_null(strstr(err.msg, "'extra'"));
    assert_non_null(strstr(err.msg, "not listed in the index"));
    /* missing shard */
    put(dir, "model.safetensors.index.json",
        "{\"weight_map\":{\"a.weight\":\"model-00002-of-00002.safetensors\","
        "\"z.weight\":\"model-00003-of-00003.safetensors\"}}");
    assert_false(nx_st_open_dir(&st, dir, &err));
    assert_non_null(strstr(err.msg, "missing shard 'model-00003-of-00003.safetensors'"));
    /* path traversal in a shard name */
    put(dir, "model.safetensors.index.json", "{\"weight_map\":{\"a.weight\":\"../x.safetensors\"}}");
    assert_false(nx_st_open_dir(&st, dir, &err));
    assert_non_null(strstr(err.msg, "plain shard file name"));
    /* bad index JSON */
    put(dir, "model.safetensors.index.json", "{\"weight_map\": ");
    assert_false(nx_st_open_dir(&st, dir, &err));
    assert_non_null(strstr(err.msg, "weight_map"));
    rm_rf(dir);

    /* a folder with nothing in it, and a truncated single file on disk */
    d = mkdir_tmp("empty");
    snprintf(dir, sizeof dir, "%s", d);
    assert_false(nx_st_open_dir(&st, dir, &err));
    assert_non_null(strstr(err.msg, "no model.safetensors"));
    put(dir, "model.safetensors", "\x10\x00\x00");
    assert_false(nx_st_open_dir(&st, dir, &err));
    assert_non_null(strstr(err.msg, "too small"));
    put(dir, "model.safetensors", "");
    assert_false(nx_st_open_dir(&st, dir, &err));
    assert_non_null(strstr(err.msg, "empty"));
    rm_rf(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values_and_order),
        cmocka_unit_test(test_all_f16_exact),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_sharded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
