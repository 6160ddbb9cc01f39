/* test_imatrix.c - importance-matrix files (src/convert/imatrix.c): the normalisation of both
 * formats (hand-derived values: llama-quantize divides GGUF sums by each matrix's count, uses 1
 * for a matrix with count 0, divides legacy values by ncall), the optional legacy trailer, and
 * the errors (pairs, non-finite values, sizes).  Whole-file agreement with llama-quantize is
 * tests/test_quantize_imatrix.sh. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert/imatrix.h"
#include "gguf/gguf.h"
#include "quant/quant.h"

/* A GGUF imatrix: entry "w" with sums (ne0 x nmat) and counts (nmat); meta: write the 3 keys;
 * with_counts false: only the .in_sum2 tensor. */
static const char *write_gguf(const char *tag, const float *sums, uint64_t ne0, uint64_t nmat, const float *counts,
                              bool meta, bool with_counts) {
    const char *path = tu_tmp_path(tag);
    nx_err err;
    nx_gguf_writer *w = nx_gguf_writer_new(&err);
    assert_non_null(w);
    assert_true(nx_gguf_add_str(w, "general.type", "imatrix", &err));
    if (meta) {
        const char *ds[] = {"data/set.txt"};
        assert_true(nx_gguf_add_arr_str(w, "imatrix.datasets", ds, 1, &err));
        assert_true(nx_gguf_add_u32(w, "imatrix.chunk_count", 7, &err));
        assert_true(nx_gguf_add_u32(w, "imatrix.chunk_size", 512, &err));
    }
    uint64_t ne_s[2] = {ne0, nmat}, ne_c[2] = {1, nmat};
    assert_true(nx_gguf_add_tensor(w, "w.in_sum2", NX_TYPE_F32, 2, ne_s, sums, &err));
    if (with_counts) assert_true(nx_gguf_add_tensor(w, "w.counts", NX_TYPE_F32, 2, ne_c, counts, &err));
    if (!nx_gguf_writer_write(w, path, &err)) fail_msg("%s", err.msg);
    nx_gguf_writer_free(w);
    return path;
}

static void test_gguf_normalisation(void **state) {
    (void)state;
    /* two matrices of 3 columns: counts 2 (stored as 1.6: rounded to 2) and 0 */
    const float sums[6] = {2, 4, 6, 8, 10, 12}, counts[2] = {1.6f, 0};
    const char *p = write_gguf("im.gguf", sums, 3, 2, counts, true, true);
    nx_imatrix *im;
    nx_err err;
    if (!nx_imatrix_load(p, &im, &err)) fail_msg("%s", err.msg);
    const nx_imatrix_entry *e = nx_imatrix_find(im, "w");
    assert_non_null(e);
    assert_int_equal(e->n, 6);
    const float want[6] = {1, 2, 3, 1, 1, 1};
    for (int i = 0; i < 6; i++) assert_true(e->values[i] == want[i]);
    assert_string_equal(im->dataset, "data/set.txt");
    assert_int_equal(im->chunk_count, 7);
    assert_null(nx_imatrix_find(im, "w.in_sum2"));
    nx_imatrix_free(im);
    remove(p);
}

static void test_gguf_errors(void **state) {
    (void)state;
    const float sums[3] = {1, 2, 3}, counts[1] = {1}, bad[3] = {1, INFINITY, 3};
    nx_imatrix *im;
    nx_err err;
    const char *p = write_gguf("nometa.gguf", sums, 3, 1, counts, false, true);
    assert_false(nx_imatrix_load(p, &im, &err));
    assert_non_null(strstr(err.msg, "missing imatrix metadata"));
    assert_non_null(strstr(err.msg, "nometa.gguf"));
    remove(p);
    p = write_gguf("nocounts.gguf", sums, 3, 1, counts, true, false);
    assert_false(nx_imatrix_load(p, &im, &err));
    assert_non_null(strstr(err.msg, "'w' has .in_sum2 but no .counts"));
    remove(p);
    p = write_gguf("inf.gguf", bad, 3, 1, counts, true, true);
    assert_false(nx_imatrix_load(p, &im, &err));
    assert_non_null(strstr(err.msg, "entry 'w' has a non-finite value"));
    remove(p);
}

static void put_i32(FILE *f, int32_t v) { assert_int_equal(fwrite(&v, 4, 1, f), 1); }

static void test_legacy(void **state) {
    (void)state;
    for (int trailer = 0; trailer < 2; trailer++) {
        const char *p = tu_tmp_path("im.dat");
        FILE *f = fopen(p, "wb");
        assert_non_null(f);
        put_i32(f, 2);
        const float a[2] = {3, 9}, b[1] = {5};
        put_i32(f, 1), fwrite("b", 1, 1, f), put_i32(f, 0), put_i32(f, 1), fwrite(b, 4, 1, f); /* ncall 0: as stored */
        put_i32(f, 1), fwrite("a", 1, 1, f), put_i32(f, 3), put_i32(f, 2), fwrite(a, 4, 2, f); /* / 3 */
        if (trailer) put_i32(f, 11), put_i32(f, 4), fwrite("text", 1, 4, f);
        fclose(f);
        nx_imatrix *im;
        nx_err err;
        if (!nx_imatrix_load(p, &im, &err)) fail_msg("%s", err.msg);
        assert_true(im->legacy);
        const nx_imatrix_entry *ea = nx_imatrix_find(im, "a"), *eb = nx_imatrix_find(im, "b");
        assert_non_null(ea);
        assert_non_null(eb);
        assert_true(ea->values[0] == 1 && ea->values[1] == 3 && eb->values[0] == 5);
        assert_int_equal(im->chunk_count, trailer ? 11 : 0);
        if (trailer) assert_string_equal(im->dataset, "text");
        else assert_null(im->dataset);
        nx_imatrix_free(im);
        remove(p);
    }
}

static void test_legacy_errors(void **state) {
    (void)state;
    const char *p = tu_tmp_path("bad.dat");
    FILE *f = fopen(p, "wb");
    put_i32(f, 1), put_i32(f, 1), fwrite("a", 1, 1, f), put_i32(f, 1), put_i32(f, 4); /* 4 values announced, none */
    fclose(f);
    nx_imatrix *im;
    nx_err err;
    assert_false(nx_imatrix_load(p, &im, &err));
    assert_non_null(strstr(err.msg, "entry 'a': 4 values announced, file truncated"));
    f = fopen(p, "wb");
    put_i32(f, 0);
    fclose(f);
    assert_false(nx_imatrix_load(p, &im, &err));
    assert_non_null(strstr(err.msg, "bad.dat: not an importance matrix"));
    remove(p);
    assert_false(nx_imatrix_load("/nonexistent/im.dat", &im, &err));
    assert_non_null(strstr(err.msg, "/nonexistent/im.dat"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gguf_normalisation), cmocka_unit_test(test_gguf_errors),
        cmocka_unit_test(test_legacy), cmocka_unit_test(test_legacy_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
