/* testutil.c - see testutil.h */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "forward/ctx_internal.h"
#include "quant/quant.h"

void tu_rng_seed(tu_rng *r, uint64_t seed) {
    uint64_t z = seed + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    r->s = (z ^ (z >> 31)) | 1;
}

uint64_t tu_rng_u64(tu_rng *r) {
    uint64_t x = r->s;
    x ^= x << 13; x ^= x >> 7; x ^= x << 17;
    return r->s = x;
}

float tu_rng_uniform(tu_rng *r) { return (float)(tu_rng_u64(r) >> 40) / (float)(1u << 24); }

float tu_rng_normal(tu_rng *r) {
    float u1 = tu_rng_uniform(r), u2 = tu_rng_uniform(r);
    if (u1 < 1e-7f) u1 = 1e-7f;
    return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853f * u2);
}

const char *tu_tmp_path(const char *tag) {
    static char buf[8][512];
    static int n;
    const char *dir = getenv("TMPDIR");
    if (!dir || !*dir) dir = "/tmp";
    char *b = buf[n % 8];
    snprintf(b, sizeof buf[0], "%s/nextn-test-%d-%d-%s", dir, (int)getpid(), n, tag);
    n++;
    return b;
}

void *tu_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (n < 0) { fclose(f); return NULL; }
    char *p = malloc((size_t)n + 1);
    if (p && n > 0 && fread(p, 1, (size_t)n, f) != (size_t)n) { free(p); p = NULL; }
    if (p) p[n] = 0; /* a NUL after the data, so text files can be used as C strings */
    fclose(f);
    if (p && len) *len = (size_t)n;
    return p;
}

const char *tu_src_path(const char *rel) {
    static char buf[1024];
    const char *root = getenv("NEXTN_SRC");
    snprintf(buf, sizeof buf, "%s/%s", root && *root ? root : ".", rel);
    return buf;
}

/* ---- tiny model ----------------------------------------------------------------------------- */

tu_tiny *tu_tiny_new(const char *preset, uint64_t seed, bool mtp, int tie) {
    tu_tiny *t = calloc(1, sizeof *t);
    assert_non_null(t);
    nx_err err;
    nx_mk_options o = {.preset = preset, .type = NX_TYPE_F32, .seed = seed, .mtp = mtp, .tie = tie};
    if (!nx_mk_memory_build(&t->mem, &o, &err)) fail_msg("%s", err.msg);
    if (!nx_model_bind(&t->model, &t->mem.hp, nx_mk_memory_lookup, &t->mem, preset, true, &err)) fail_msg("%s", err.msg);
    t->pool = nx_pool_create(2, &err);
    if (!t->pool) fail_msg("%s", err.msg);
    return t;
}

int tu_tiny_teardown(void **state) {
    tu_tiny *t = *state;
    nx_pool_free(t->pool);
    nx_model_release(&t->model);
    nx_mk_memory_free(&t->mem);
    free(t);
    return 0;
}

nx_ctx *tu_tiny_ctx(tu_tiny *t, int n_ctx, int n_seq, int n_snap, nx_kv_type kv) {
    nx_ctx_params p = nx_ctx_default_params();
    p.n_ctx = n_ctx;
    p.n_seq = n_seq;
    p.n_snapshots = n_snap;
    p.kv_type = kv;
    p.kv_type_v = kv;
    nx_ctx *c;
    nx_err err;
    if (!nx_ctx_create(&c, &t->model, &p, t->pool, &err)) fail_msg("%s", err.msg);
    return c;
}

void tu_decode(nx_ctx *c, int seq, const int32_t *tokens, int n) {
    int32_t pos[256], sid[256];
    int8_t lg[256];
    assert_true(n <= 256);
    const int32_t p0 = nx_ctx_n_past(c, seq);
    for (int i = 0; i < n; i++) {
        pos[i] = p0 + i;
        sid[i] = seq;
        lg[i] = 1;
    }
    nx_batch b = {n, tokens, pos, sid, lg};
    nx_err err;
    if (!nx_forward(c, &b, &err)) fail_msg("%s", err.msg);
}

double tu_max_abs_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - (double)b[i]));
    return m;
}

double tu_state_diff(const nx_ctx *a, int sa, const nx_ctx *b, int sb) {
    double m = 0;
    const nx_rstate *ra = &a->rs, *rb = &b->rs;
    for (int l = 0; l < ra->n_layer; l++) {
        m = fmax(m, tu_max_abs_diff(nx_rstate_conv(ra, l, ra->cur[sa], sa), nx_rstate_conv(rb, l, rb->cur[sb], sb),
                                    ra->conv_n));
        /* the current delta state: a slot, or a slot plus pending replay rows */
        float *x = malloc(ra->ssm_n * sizeof(float)), *y = malloc(rb->ssm_n * sizeof(float));
        assert_non_null(x);
        assert_non_null(y);
        nx_rstate_ssm_current(ra, l, sa, x);
        nx_rstate_ssm_current(rb, l, sb, y);
        m = fmax(m, tu_max_abs_diff(x, y, ra->ssm_n));
        free(x);
        free(y);
    }
    return m;
}

nextn_model *tu_demo_model(bool mtp) {
    nextn_model *m = NULL;
    nextn_error err;
    nextn_model_params mp = nextn_model_default_params();
    mp.load_mtp = mtp;
    if (!nextn_model_load(&m, tu_src_path("models/nextn-demo.gguf"), &mp, &err)) {
        fprintf(stderr, "models/nextn-demo.gguf: %s\n", err.msg);
        return NULL;
    }
    return m;
}

int32_t tu_demo_prompt(int32_t *out, int32_t cap, int n_lines) {
    FILE *fp = fopen(tu_src_path("tests/fixtures/demo-model/prompts.txt"), "r");
    if (!fp) fail_msg("cannot open tests/fixtures/demo-model/prompts.txt");
    char line[8192];
    int32_t n = 0;
    for (int k = 0; k < n_lines && fgets(line, sizeof line, fp); k++)
        for (char *t = strtok(line, ",\n"); t && n < cap; t = strtok(NULL, ",\n")) out[n++] = (int32_t)strtol(t, NULL, 10);
    fclose(fp);
    return n;
}

int tu_read_tokens(const char *rel, int32_t *tok, int cap) {
    size_t len;
    char *raw = tu_read_file(tu_src_path(rel), &len); /* NUL-terminated */
    if (!raw) fail_msg("cannot read %s", rel);
    int n = 0;
    for (char *p = raw; *p && n < cap;) {
        tok[n++] = (int32_t)strtol(p, &p, 10);
        while (*p == ',' || *p == '\n' || *p == ' ') p++;
    }
    free(raw);
    return n;
}

uint64_t tu_fnv1a64_file(const char *path, size_t *len) {
    uint8_t *d = tu_read_file(path, len);
    if (!d) fail_msg("%s: cannot read", path);
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < *len; i++) h = (h ^ d[i]) * 0x100000001b3ull;
    free(d);
    return h;
}

bool tu_recorded(const char *manifest, const char *key1, const char *key2, unsigned long long *size,
                 unsigned long long *hash) {
    size_t len;
    char *man = tu_read_file(tu_src_path(manifest), &len);
    if (!man) fail_msg("cannot read %s", manifest);
    bool found = false, refused = false;
    for (char *line = man, *nl; !found && (nl = strchr(line, '\n')); line = nl + 1) {
        *nl = 0;
        char a[64], b[64], c[32];
        if (line[0] == '#' || sscanf(line, "%63s %63s %31s", a, b, c) != 3) continue;
        if (strcmp(a, key1) || strcmp(b, key2)) continue;
        found = true;
        refused = !strcmp(c, "refused");
        if (!refused) assert_int_equal(sscanf(line, "%*s %*s %llu %llx", size, hash), 2);
    }
    free(man);
    if (!found) fail_msg("%s has no line '%s %s'", manifest, key1, key2);
    return !refused;
}

void tu_expect_recorded(const char *manifest, const char *key1, const char *key2, const char *path) {
    unsigned long long size = 0, hash = 0;
    if (!tu_recorded(manifest, key1, key2, &size, &hash)) fail_msg("%s %s: llama-quantize refused it", key1, key2);
    size_t got_len;
    uint64_t got = tu_fnv1a64_file(path, &got_len);
    if (got_len != size || got != hash) {
        if (!strcmp(key1, "input"))
            fail_msg("input %s changed (%zu bytes, fnv1a64 %016llx; recorded %llu, %016llx): regenerate the "
                     "fixtures (tests/fixtures/README.md, quantize/)", key2, got_len, (unsigned long long)got, size,
                     hash);
        fail_msg("%s %s: %zu bytes, fnv1a64 %016llx; llama-quantize wrote %llu bytes, %016llx", key1, key2, got_len,
                 (unsigned long long)got, size, hash);
    }
}
