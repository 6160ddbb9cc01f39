/* test_model_load.c - GGUF loading of qwen35 files written by mkmodel: round trip against the
 * in-memory model, determinism of mkmodel, quantized variants, and clear errors for unknown
 * architecture, missing tensor, wrong shape, missing key, inconsistent hyper-parameters. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "forward/forward.h"
#include "gguf/gguf.h"
#include "convert/mkmodel.h"
#include "quant/quant.h"

static nx_pool *pool;
static const char *tiny_path;    /* tiny f32 with MTP, seed 3 */

static int setup(void **state) {
    (void)state;
    nx_err err;
    pool = nx_pool_create(2, &err);
    static char path[512];
    snprintf(path, sizeof path, "%s", tu_tmp_path("tiny.gguf"));
    nx_mk_options o = {.preset = "tiny", .type = NX_TYPE_F32, .seed = 3, .mtp = true, .tie = -1};
    if (!nx_mkmodel_write(&o, path, pool, &err)) fail_msg("%s", err.msg);
    tiny_path = path;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    remove(tiny_path);
    nx_pool_free(pool);
    return 0;
}

/* Logits of a fixed 6-token prompt (last row). */
static void run_prompt(const nx_model *m, float *out) {
    nx_ctx_params p = nx_ctx_default_params();
    p.n_ctx = 16;
    p.kv_type = NX_KV_F32;
    p.kv_type_v = NX_KV_F32;
    nx_ctx *c;
    nx_err err;
    if (!nx_ctx_create(&c, m, &p, pool, &err)) fail_msg("%s", err.msg);
    int32_t tok[6] = {5, 300, 7, 256, 42, 99}, pos[6] = {0, 1, 2, 3, 4, 5};
    nx_batch b = {6, tok, pos, NULL, NULL};
    if (!nx_forward(c, &b, &err)) fail_msg("%s", err.msg);
    memcpy(out, nx_ctx_logits(c, 5), m->hp.n_vocab * sizeof(float));
    nx_ctx_free(c);
}

static void test_file_round_trip_equals_memory_model(void **state) {
    (void)state;
    nx_err err;
    nx_model *m;
    if (!nx_model_load(&m, tiny_path, true, &err)) fail_msg("%s", err.msg);
    assert_int_equal(m->hp.n_layer, 6);
    assert_int_equal(m->hp.n_mtp, 1);
    assert_int_equal(m->hp.ssm_n_group, 2);
    assert_int_equal(m->hp.ssm_dt_rank, 4);
    assert_int_equal(m->hp.n_vocab, 512);
    assert_int_equal(m->hp.rope_sections[0], 11);
    assert_true(m->mtp.present);
    assert_false(m->tied);
    assert_true(m->hp.recurrent[0] && m->hp.recurrent[1] && !m->hp.recurrent[2] && !m->hp.recurrent[6]);

    nx_mk_memory mem;
    nx_mk_options o = {.preset = "tiny", .type = NX_TYPE_F32, .seed = 3, .mtp = true, .tie = -1};
    assert_true(nx_mk_memory_build(&mem, &o, &err));
    nx_model mm;
    assert_true(nx_model_bind(&mm, &mem.hp, nx_mk_memory_lookup, &mem, "mem", true, &err));
    float *a = malloc(512 * sizeof(float)), *b = malloc(512 * sizeof(float));
    run_prompt(m, a);
    run_prompt(&mm, b);
    assert_memory_equal(a, b, 512 * sizeof(float)); /* same bytes in, same computation */
    free(a);
    free(b);
    nx_model_release(&mm);
    nx_mk_memory_free(&mem);
    nx_model_free(m);
}

/* The presets carry the real shapes (from the Hugging Face config.json of each size) and every matrix row length is
 * a multiple of 256, so all K-quant types apply. */
static void test_presets_have_real_shapes(void **state) {
    (void)state;
    static const struct { const char *name; uint32_t E, L, F, H, Hkv, Hv; bool tied; } want[] = {
        {"0.8b", 1024, 24, 3584, 8, 2, 16, true},   {"2b", 2048, 24, 6144, 8, 2, 16, true},
        {"4b", 2560, 32, 9216, 16, 4, 32, true},    {"9b", 4096, 32, 12288, 16, 4, 32, false},
    };
    nx_err err;
    for (size_t i = 0; i < NX_ARRAY_LEN(want); i++) {
        nx_mk_options o = {.preset = want[i].name, .type = NX_TYPE_F32, .seed = 1, .mtp = true, .tie = -1};
        nx_hparams hp;
        bool tied;
        if (!nx_mk_hparams(&o, &hp, &tied, &err)) fail_msg("%s: %s", want[i].name, err.msg);
        assert_int_equal(hp.n_embd, want[i].E);
        assert_int_equal(hp.n_layer, want[i].L);
        assert_int_equal(hp.n_layer_all, want[i].L + 1);
        assert_int_equal(hp.n_ff, want[i].F);
        assert_int_equal(hp.n_head, want[i].H);
        assert_int_equal(hp.n_head_kv, want[i].Hkv);
        assert_int_equal(hp.ssm_dt_rank, want[i].Hv);
        assert_int_equal(hp.ssm_n_group, 16);
        assert_int_equal(hp.ssm_d_state, 128);
        assert_int_equal(hp.head_dim, 256);
        assert_int_equal(hp.n_rot, 64);
        assert_int_equal(tied, want[i].tied);
        assert_true(!hp.recurrent[3] && hp.recurrent[0] && hp.recurrent[2] && !hp.recurrent[want[i].L]);
        nx_mk_tensor *ts;
        int n = nx_mk_tensors(&hp, tied, false, &ts, &err);
        assert_true(n > 0);
        /* globals + per layer (GDN 13 / attention 11) + MTP 14 */
        int gdn = 0;
        for (uint32_t l = 0; l < hp.n_layer; l++) gdn += hp.recurrent[l];
        assert_int_equal(n, 2 + !tied + gdn * 14 + ((int)hp.n_layer - gdn) * 11 + 15);
        for (int k = 0; k < n; k++)
            if (!ts[k].keep_f32) assert_int_equal(ts[k].ne[0] % 256, 0);
        free(ts);
    }
    nx_mk_options bad = {.preset = "70b", .type = NX_TYPE_F32, .tie = -1};
    nx_hparams hp;
    bool tied;
    assert_false(nx_mk_hparams(&bad, &hp, &tied, &err));
    assert_non_null(strstr(err.msg, "70b"));
}

static void test_mkmodel_is_deterministic(void **state) {
    (void)state;
    nx_err err;
    char p1[512], p2[512];
    snprintf(p1, sizeof p1, "%s", tu_tmp_path("det1.gguf"));
    snprintf(p2, sizeof p2, "%s", tu_tmp_path("det2.gguf"));
    nx_mk_options o = {.preset = "tiny", .type = NX_TYPE_Q8_0, .seed = 9, .mtp = false, .tie = -1, .n_vocab = 1000};
    assert_true(nx_mkmodel_write(&o, p1, pool, &err));
    nx_pool *one = nx_pool_create(1, &err);
    assert_true(nx_mkmodel_write(&o, p2, one, &err)); /* thread count must not matter */
    nx_pool_free(one);
    size_t n1, n2;
    void *d1 = tu_read_file(p1, &n1), *d2 = tu_read_file(p2, &n2);
    assert_int_equal(n1, n2);
    assert_memory_equal(d1, d2, n1);
    free(d2);
    o.seed = 10;
    assert_true(nx_mkmodel_write(&o, p2, pool, &err));
    d2 = tu_read_file(p2, &n2);
    assert_int_equal(n1, n2);
    assert_true(memcmp(d1, d2, n1) != 0);
    free(d1);
    free(d2);
    /* --no-mtp: block_count = L, no nextn key, loads without an MTP block */
    nx_model *m;
    assert_true(nx_model_load(&m, p1, true, &err));
    assert_int_equal(m->hp.n_mtp, 0);
    assert_int_equal(m->hp.n_layer_all, 6);
    assert_false(m->mtp.present);
    assert_int_equal(m->hp.n_vocab, 1000);
    nx_model_free(m);
    remove(p1);
    remove(p2);
}

/* A lookup that hands out the file's tensors dequantized to F32 (the exact weights a quantized
 * model computes with, minus the kernels). */
typedef struct deq {
    const nx_gguf *g;
    void *bufs[512];
    int n;
} deq;

static bool deq_lookup(void *user, const char *name, nx_tensor_info *out) {
    deq *d = user;
    const nx_gguf_tensor *t = nx_gguf_find_tensor(d->g, name);
    if (!t) return false;
    out->type = NX_TYPE_F32;
    out->n_dims = t->n_dims;
    uint64_t n = 1;
    for (int i = 0; i < 4; i++) { out->ne[i] = t->ne[i]; n *= t->ne[i]; }
    float *f = malloc(n * sizeof(float));
    assert_true(d->n < 512);
    d->bufs[d->n++] = f;
    nx_type_get(t->type)->to_float(t->data, f, (int64_t)n);
    out->data = f;
    return true;
}

/* Every quantized type mkmodel offers loads and runs.  Its logits match an F32 model holding the
 * same (dequantized) weights up to the activation rounding of the dot kernels, and stay near
 * the original F32 model's. */
static void test_quantized_files_load_and_run(void **state) {
    (void)state;
    const nx_type types[] = {NX_TYPE_F16, NX_TYPE_BF16, NX_TYPE_Q8_0, NX_TYPE_Q4_0, NX_TYPE_Q4_K, NX_TYPE_Q6_K};
    nx_err err;
    nx_model *ref;
    assert_true(nx_model_load(&ref, tiny_path, false, &err));
    float *lr = malloc(512 * sizeof(float)), *lq = malloc(512 * sizeof(float)), *ld = malloc(512 * sizeof(float));
    run_prompt(ref, lr);
    for (size_t i = 0; i < NX_ARRAY_LEN(types); i++) {
        const nx_type_traits *tt = nx_type_get(types[i]);
        if (!tt || !tt->from_float) fail_msg("type %s has no quantiser", nx_type_name(types[i]));
        char p[512];
        snprintf(p, sizeof p, "%s", tu_tmp_path("q.gguf"));
        nx_mk_options o = {.preset = "tiny", .type = types[i], .seed = 3, .mtp = true, .tie = -1};
        if (!nx_mkmodel_write(&o, p, pool, &err)) fail_msg("%s: %s", nx_type_name(types[i]), err.msg);
        nx_model *m;
        if (!nx_model_load(&m, p, true, &err)) fail_msg("%s: %s", nx_type_name(types[i]), err.msg);
        assert_int_equal(m->layers[0].ffn_up.type, types[i]);
        assert_int_equal(m->tok_embd.type, types[i]);
        run_prompt(m, lq);
        deq d = {.g = m->gguf};
        nx_model dm;
        if (!nx_model_bind(&dm, &m->hp, deq_lookup, &d, p, false, &err)) fail_msg("%s", err.msg);
        run_prompt(&dm, ld);
        double kern = 0, quant = 0, scale = 0;
        for (int v = 0; v < 512; v++) {
            kern = fmax(kern, fabs(lq[v] - ld[v]));
            quant = fmax(quant, fabs(lq[v] - lr[v]));
            scale = fmax(scale, fabs(lr[v]));
        }
        /* kernels: activations rounded to q8 (or f16/bf16) per dot product */
        print_message("%s: kern %g quant %g scale %g\n", nx_type_name(types[i]), kern, quant, scale);
        if (!(kern < 0.15 * scale)) fail_msg("%s: logits differ from dequantized-F32 weights by %g (scale %g)",
                                             nx_type_name(types[i]), kern, scale);
        /* the weights themselves: random models amplify 4-bit rounding, so only a loose bound */
        if (!(quant < 1.5 * scale)) fail_msg("%s: logits differ from the F32 model by %g (scale %g)",
                                             nx_type_name(types[i]), quant, scale);
        nx_model_release(&dm);
        for (int k = 0; k < d.n; k++) free(d.bufs[k]);
        nx_model_free(m);
        remove(p);
    }
    free(lr);
    free(lq);
    free(ld);
    nx_model_free(ref);
}

/* ---- broken files: rewrite tiny_path with one edit ------------------------------------------ */

typedef struct edit {
    const char *drop_tensor;
    const char *transpose_tensor;
    const char *drop_key;
    const char *str_key, *str_val;
    const char *u32_key;
    uint32_t u32_val;
    const char *retype_tensor;   /* F32 tensor relabelled as I32 (same bytes) */
} edit;

static const char *rewrite(const edit *e) {
    static char out[512];
    snprintf(out, sizeof out, "%s", tu_tmp_path("edit.gguf"));
    nx_err err;
    nx_gguf *g;
    if (!nx_gguf_open(&g, tiny_path, &err)) fail_msg("%s", err.msg);
    nx_gguf_writer *w = nx_gguf_writer_new(&err);
    assert_non_null(w);
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const nx_gguf_kv *kv = &g->kv[i];
        if (nx_str_eq(kv->key, "general.alignment")) continue;
        if (e->drop_key && nx_str_eq(kv->key, e->drop_key)) continue;
        bool ok;
        if (e->str_key && nx_str_eq(kv->key, e->str_key)) ok = nx_gguf_add_str(w, e->str_key, e->str_val, &err);
        else if (e->u32_key && nx_str_eq(kv->key, e->u32_key)) ok = nx_gguf_add_u32(w, e->u32_key, e->u32_val, &err);
        else ok = nx_gguf_add_kv_copy(w, kv, &err);
        if (!ok) fail_msg("%s", err.msg);
    }
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
        uint32_t type = t->type;
        if (e->retype_tensor && nx_str_eq(t->name, e->retype_tensor)) type = NX_TYPE_I32;
        if (!nx_gguf_add_tensor(w, name, type, t->n_dims, ne, t->data, &err)) fail_msg("%s", err.msg);
    }
    if (!nx_gguf_writer_write(w, out, &err)) fail_msg("%s", err.msg);
    nx_gguf_writer_free(w);
    nx_gguf_close(g);
    return out;
}

static void expect_load_error(const edit *e, bool want_mtp, const char *needle) {
    const char *p = rewrite(e);
    nx_err err;
    nx_model *m = NULL;
    bool ok = nx_model_load(&m, p, want_mtp, &err);
    if (ok) {
        nx_model_free(m);
        fail_msg("load succeeded, expected an error containing \"%s\"", needle);
    }
    if (!strstr(err.msg, needle)) fail_msg("error \"%s\" lacks \"%s\"", err.msg, needle);
    assert_non_null(strstr(err.msg, p)); /* names the file */
    remove(p);
}

static void test_unknown_architecture(void **state) {
    (void)state;
    edit e = {.str_key = "general.architecture", .str_val = "llama"};
    expect_load_error(&e, true, "unsupported general.architecture 'llama'");
}

static void test_missing_tensor(void **state) {
    (void)state;
    edit e = {.drop_tensor = "blk.1.ssm_a"};
    expect_load_error(&e, true, "missing tensor 'blk.1.ssm_a'");
    edit e2 = {.drop_tensor = "blk.2.attn_k_norm.weight"};
    expect_load_error(&e2, true, "missing tensor 'blk.2.attn_k_norm.weight'");
}

static void test_wrong_shape(void **state) {
    (void)state;
    edit e = {.transpose_tensor = "blk.2.attn_q.weight"};
    expect_load_error(&e, true, "tensor 'blk.2.attn_q.weight' has shape {1024, 256}, expected {256, 1024}");
    edit e2 = {.transpose_tensor = "blk.0.ssm_conv1d.weight"};
    expect_load_error(&e2, true, "tensor 'blk.0.ssm_conv1d.weight' has shape {512, 4}, expected {4, 512}");
}

static void test_wrong_type(void **state) {
    (void)state;
    edit e = {.retype_tensor = "blk.3.ffn_up.weight"};
    expect_load_error(&e, true, "tensor 'blk.3.ffn_up.weight' has unsupported type i32");
    edit e2 = {.retype_tensor = "blk.0.ssm_conv1d.weight"};
    expect_load_error(&e2, true, "tensor 'blk.0.ssm_conv1d.weight' has unsupported type i32");
}

static void test_missing_key_and_bad_hparams(void **state) {
    (void)state;
    edit e = {.drop_key = "qwen35.ssm.state_size"};
    expect_load_error(&e, true, "qwen35.ssm.state_size");
    edit e2 = {.u32_key = "qwen35.ssm.inner_size", .u32_val = 300};
    expect_load_error(&e2, true, "ssm.inner_size");
    edit e3 = {.u32_key = "qwen35.ssm.group_count", .u32_val = 3};
    expect_load_error(&e3, true, "not a multiple of ssm.group_count");
    edit e4 = {.u32_key = "qwen35.nextn_predict_layers", .u32_val = 7};
    expect_load_error(&e4, true, "nextn_predict_layers = 7 must be < block_count");
}

static void test_mtp_block_is_optional_unless_wanted(void **state) {
    (void)state;
    edit e = {.drop_tensor = "blk.6.nextn.eh_proj.weight"};
    expect_load_error(&e, true, "missing tensor 'blk.6.nextn.eh_proj.weight'");
    const char *p = rewrite(&e);
    nx_err err;
    nx_model *m;
    assert_true(nx_model_load(&m, p, false, &err)); /* trunk only: fine */
    assert_false(m->mtp.present);
    nx_model_free(m);
    remove(p);
}

/* ---- 2 MiB pages for the weights (model_load.c nx_map_prefer_huge) ---- */

#define HUGE_FILE ((size_t)16 << 20)

/* A file of HUGE_FILE bytes written in 1 MiB pieces (on ext4 that leaves its page cache in small
 * folios), each byte a function of its offset. */
static void write_pattern(const char *path) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    unsigned char *buf = malloc((size_t)1 << 20);
    for (size_t off = 0; off < HUGE_FILE; off += (size_t)1 << 20) {
        for (size_t i = 0; i < ((size_t)1 << 20); i++) buf[i] = (unsigned char)((off + i) * 2654435761u >> 13);
        assert_int_equal(write(fd, buf, (size_t)1 << 20), 1 << 20);
    }
    assert_int_equal(fsync(fd), 0);
    close(fd);
    free(buf);
}

static bool same_pattern(const unsigned char *p) {
    for (size_t i = 0; i < HUGE_FILE; i++)
        if (p[i] != (unsigned char)(i * 2654435761u >> 13)) return false;
    return true;
}

/* The first `size` bytes of the file, mapped and populated through the mapping (2 MiB pages advised). */
static unsigned char *map_populated(const char *path, size_t size) {
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    void *p = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    assert_true(p != MAP_FAILED);
    madvise(p, size, MADV_HUGEPAGE);
    madvise(p, size, MADV_POPULATE_READ);
    return p;
}

/* Whether this kernel maps a file read in through a mapping with 2 MiB entries: the same
 * pattern in a second file, its cached pages dropped before the first mapping. */
static bool kernel_maps_files_huge(void) {
    char path[512];
    snprintf(path, sizeof path, "%s", tu_tmp_path("huge-probe.bin"));
    write_pattern(path);
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
    unsigned char *p = map_populated(path, HUGE_FILE);
    const int64_t huge = nx_map_huge_bytes(p);
    munmap(p, HUGE_FILE);
    remove(path);
    return huge > 0;
}

/* A file whose cache is in small folios is read again into 2 MiB-mapped pages wherever the kernel
 * can map files so; the contents never change, and a file below min_bytes is left alone. */
static void test_prefault_rereads_into_huge_pages(void **state) {
    (void)state;
    const bool can = kernel_maps_files_huge();
    char path[512];
    snprintf(path, sizeof path, "%s", tu_tmp_path("huge.bin"));
    write_pattern(path);
    unsigned char *p = map_populated(path, HUGE_FILE);
    const int64_t before = nx_map_huge_bytes(p);
    assert_false(nx_map_prefer_huge(p, HUGE_FILE, 4096, path, HUGE_FILE + 1)); /* too small: untouched */
    assert_int_equal(nx_map_huge_bytes(p), before);
    const bool reread = nx_map_prefer_huge(p, HUGE_FILE, 4096, path, HUGE_FILE);
    const int64_t after = nx_map_huge_bytes(p);
    assert_true(same_pattern(p));
    if (before >= 0 && (size_t)before >= HUGE_FILE / 2) {
        print_message("the written file came back 2 MiB-mapped already (%lld bytes): nothing to re-read\n",
                      (long long)before);
        assert_false(reread);
    } else if (can) {
        assert_true(reread);
        assert_true(after >= (int64_t)(HUGE_FILE / 2));
    } else {
        print_message("this kernel maps files with 4 KiB entries only: only the contents were checked\n");
        assert_false(reread);
    }
    /* a second call finds the pages mapped as they now are and does nothing more */
    if (reread) assert_false(nx_map_prefer_huge(p, HUGE_FILE, 4096, path, HUGE_FILE));
    assert_true(same_pattern(p));
    munmap(p, HUGE_FILE);
    remove(path);
}

/* A model file above the loader's 64 MiB re-read threshold (0.8b widths, 4 layers, q8_0: 89 MiB)
 * whose page cache is in small folios: written again in 1 MiB pieces, as write_pattern. */
static uint64_t write_big_model(const char *path) {
    char src[512];
    snprintf(src, sizeof src, "%s", tu_tmp_path("big-src.gguf"));
    nx_mk_options o = {.preset = "0.8b", .type = NX_TYPE_Q8_0, .seed = 5, .mtp = false, .tie = -1, .n_layers = 4};
    nx_err err;
    if (!nx_mkmodel_write(&o, src, pool, &err)) fail_msg("%s", err.msg);
    size_t len;
    unsigned char *buf = tu_read_file(src, &len);
    assert_non_null(buf);
    remove(src);
    assert_true(len >= ((size_t)64 << 20));
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    for (size_t off = 0; off < len; off += (size_t)1 << 20) {
        const size_t n = len - off < ((size_t)1 << 20) ? len - off : (size_t)1 << 20;
        assert_int_equal(write(fd, buf + off, n), (ssize_t)n);
    }
    assert_int_equal(fsync(fd), 0);
    close(fd);
    free(buf);
    return len;
}

static void load_info(const char *path, bool no_reread, nextn_model_info *info) {
    nextn_model_params mp = nextn_model_default_params();
    mp.no_huge_reread = no_reread;
    nextn_model *m;
    nextn_error err;
    if (!nextn_model_load(&m, path, &mp, &err)) fail_msg("%s", err.msg);
    nextn_model_get_info(m, info);
    nextn_model_free(m);
}

/* nextn_model_params.no_huge_reread leaves a cache in small folios as it is (no 2 MiB entries
 * appear); by default the same load re-reads it into 2 MiB-mapped pages where the kernel can; the
 * info reports both (huge_reread, huge_mapped_bytes). */
static void test_load_reports_pages_and_can_skip_the_reread(void **state) {
    (void)state;
    assert_false(nextn_model_default_params().no_huge_reread);
    const bool can = kernel_maps_files_huge();
    char path[512];
    snprintf(path, sizeof path, "%s", tu_tmp_path("big.gguf"));
    const uint64_t size = write_big_model(path);
    /* what a mapping of the cached file gets before any load (the file's folios as written) */
    unsigned char *p = map_populated(path, size);
    const int64_t before = nx_map_huge_bytes(p);
    munmap(p, size);

    nextn_model_info off, on, again;
    load_info(path, true, &off);
    assert_int_equal(off.file_bytes, size);
    assert_false(off.huge_reread);
    load_info(path, false, &on);
    load_info(path, true, &again); /* the cache as the default load left it */
    assert_false(again.huge_reread);
    print_message("%llu MiB file: 2 MiB-mapped before %lld, re-read off %llu, default %llu (re-read: %s), "
                  "then off again %llu bytes\n", (unsigned long long)(size >> 20), (long long)before,
                  (unsigned long long)off.huge_mapped_bytes, (unsigned long long)on.huge_mapped_bytes,
                  on.huge_reread ? "yes" : "no", (unsigned long long)again.huge_mapped_bytes);
    if (before >= 0 && (uint64_t)before >= size / 2) {
        print_message("the written file came back 2 MiB-mapped already: no re-read to switch off\n");
        assert_false(on.huge_reread);
        assert_true(off.huge_mapped_bytes > 0 && on.huge_mapped_bytes > 0);
    } else if (can) {
        assert_true(off.huge_mapped_bytes < size / 2); /* left as it was: no drop, no re-read */
        assert_true(on.huge_reread);
        assert_true(on.huge_mapped_bytes >= size / 2);
        assert_true(again.huge_mapped_bytes >= size / 2); /* measured, not inferred from the flag */
    } else {
        print_message("this kernel maps files with 4 KiB entries only: huge_mapped_bytes stays 0, no re-read\n");
        assert_false(on.huge_reread);
        assert_int_equal(off.huge_mapped_bytes, 0);
        assert_int_equal(on.huge_mapped_bytes, 0);
    }
    remove(path);
}

/* A file not in the page cache at all comes in as 2 MiB folios on its first load, without the
 * re-read: the mapping is advised MADV_HUGEPAGE before anything reads through it (reading the
 * GGUF header first brought the file's first pages, and with them about half of it, in small
 * folios: 54 % 2 MiB-mapped for this file, where the re-read's "less than half" rule does not
 * fire).  Loaded with the re-read off, so only the first read decides. */
static void test_cold_file_loads_into_huge_pages(void **state) {
    (void)state;
    const bool can = kernel_maps_files_huge();
    char path[512];
    snprintf(path, sizeof path, "%s", tu_tmp_path("cold.gguf"));
    const uint64_t size = write_big_model(path); /* fsync'd: its cached pages are clean */
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0); /* out of the page cache */
    close(fd);
    nextn_model_info info;
    load_info(path, true, &info);
    assert_false(info.huge_reread);
    print_message("cold %llu MiB file, re-read off: %llu bytes 2 MiB-mapped after the load\n",
                  (unsigned long long)(size >> 20), (unsigned long long)info.huge_mapped_bytes);
    if (can) assert_true(info.huge_mapped_bytes >= size * 3 / 4);
    else {
        print_message("this kernel maps files with 4 KiB entries only: nothing to check but the load\n");
        assert_int_equal(info.huge_mapped_bytes, 0);
    }
    remove(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_file_round_trip_equals_memory_model),
        cmocka_unit_test(test_presets_have_real_shapes),
        cmocka_unit_test(test_mkmodel_is_deterministic),
        cmocka_unit_test(test_quantized_files_load_and_run),
        cmocka_unit_test(test_unknown_architecture),
        cmocka_unit_test(test_missing_tensor),
        cmocka_unit_test(test_wrong_shape),
        cmocka_unit_test(test_wrong_type),
        cmocka_unit_test(test_missing_key_and_bad_hparams),
        cmocka_unit_test(test_mtp_block_is_optional_unless_wanted),
        cmocka_unit_test(test_prefault_rereads_into_huge_pages),
        cmocka_unit_test(test_load_reports_pages_and_can_skip_the_reread),
        cmocka_unit_test(test_cold_file_loads_into_huge_pages),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
