/* kv_cache.c - attention K/V cache storage, truncation and copy. */
#include "forward/kv_cache.h"

#include <stdlib.h>
#include <string.h>

#include "quant/quant.h"

bool nx_kv_init(nx_kv_cache *c, int n_layer, int kv_dim, int n_ctx, int n_seq, nx_kv_type type, nx_err *err) {
    memset(c, 0, sizeof *c);
    if (n_ctx <= 0 || n_seq <= 0 || kv_dim <= 0 || n_layer < 0)
        return nx_fail(err, "kv cache: invalid size (n_ctx %d, n_seq %d, kv_dim %d)", n_ctx, n_seq, kv_dim);
    c->n_layer = n_layer;
    c->n_seq = n_seq;
    c->n_ctx = n_ctx;
    c->kv_dim = kv_dim;
    c->type = type;
    c->elt = type == NX_KV_F16 ? 2 : 4;
    uint64_t n;
    if (!nx_mul_ok((uint64_t)n_layer * (uint64_t)n_seq, (uint64_t)n_ctx * (uint64_t)kv_dim, &n) ||
        !nx_mul_ok(n, c->elt, &n) || n > SIZE_MAX / 2)
        return nx_fail(err, "kv cache: size overflow (n_ctx %d x n_seq %d)", n_ctx, n_seq);
    /* calloc: large blocks come from mmap as untouched zero pages, so cells never used cost no
     * resident memory (aligned_alloc + memset would touch all of them) */
    c->k = nx_calloc(1, n ? n : 64, "kv cache keys", err);
    c->v = c->k ? nx_calloc(1, n ? n : 64, "kv cache values", err) : NULL;
    c->len = c->v ? nx_calloc((size_t)n_seq, sizeof *c->len, "kv cache lengths", err) : NULL;
    if (!c->len) {
        nx_kv_free(c);
        return false;
    }
    return true;
}

void nx_kv_free(nx_kv_cache *c) {
    free(c->k);
    free(c->v);
    free(c->len);
    c->k = c->v = NULL;
    c->len = NULL;
}

size_t nx_kv_bytes(const nx_kv_cache *c) {
    return 2 * (size_t)c->n_layer * (size_t)c->n_seq * (size_t)c->n_ctx * (size_t)c->kv_dim * c->elt;
}

const char *nx_kv_type_name(nx_kv_type t) { return t == NX_KV_F16 ? "f16" : "f32"; }

static void store_row(const nx_kv_cache *c, uint8_t *dst, const float *src) {
    if (c->type == NX_KV_F32) {
        memcpy(dst, src, (size_t)c->kv_dim * sizeof(float));
    } else {
        uint16_t *d = (uint16_t *)dst;
        for (int i = 0; i < c->kv_dim; i++) d[i] = nx_f32_to_f16(src[i]);
    }
}

void nx_kv_store(nx_kv_cache *c, int layer, int seq, int pos, const float *k, const float *v) {
    size_t off = nx_kv_offset(c, layer, seq, pos);
    store_row(c, c->k + off, k);
    store_row(c, c->v + off, v);
}

void nx_kv_commit(nx_kv_cache *c, int seq, int32_t n) { c->len[seq] += n; }

void nx_kv_truncate(nx_kv_cache *c, int seq, int32_t from_pos) {
    if (from_pos < c->len[seq]) c->len[seq] = from_pos;
}

bool nx_kv_copy(nx_kv_cache *c, int src, int dst, nx_err *err) {
    if (src < 0 || src >= c->n_seq || dst < 0 || dst >= c->n_seq)
        return nx_fail(err, "kv cache: sequence copy %d -> %d out of range (n_seq %d)", src, dst, c->n_seq);
    if (src == dst) return true;
    size_t bytes = (size_t)c->len[src] * (size_t)c->kv_dim * c->elt;
    for (int l = 0; l < c->n_layer; l++) {
        memcpy(c->k + nx_kv_offset(c, l, dst, 0), c->k + nx_kv_offset(c, l, src, 0), bytes);
        memcpy(c->v + nx_kv_offset(c, l, dst, 0), c->v + nx_kv_offset(c, l, src, 0), bytes);
    }
    c->len[dst] = c->len[src];
    return true;
}

/* Cells [0, n) of seq, every layer, in the cache type: [layer][n][kv_dim] for k and for v. */
size_t nx_kv_cells_bytes(const nx_kv_cache *c, int32_t n) {
    return (size_t)c->n_layer * (size_t)n * (size_t)c->kv_dim * c->elt;
}

bool nx_kv_export(const nx_kv_cache *c, int seq, int32_t n, uint8_t *k, uint8_t *v, nx_err *err) {
    if (seq < 0 || seq >= c->n_seq) return nx_fail(err, "kv cache: sequence %d out of range (n_seq %d)", seq, c->n_seq);
    if (n < 0 || n > c->len[seq])
        return nx_fail(err, "kv cache: sequence %d holds %d cells, %d asked", seq, c->len[seq], n);
    const size_t bytes = (size_t)n * (size_t)c->kv_dim * c->elt;
    for (int l = 0; l < c->n_layer; l++) {
        memcpy(k + (size_t)l * bytes, c->k + nx_kv_offset(c, l, seq, 0), bytes);
        memcpy(v + (size_t)l * bytes, c->v + nx_kv_offset(c, l, seq, 0), bytes);
    }
    return true;
}

bool nx_kv_import(nx_kv_cache *c, int seq, int32_t n, const uint8_t *k, const uint8_t *v, nx_err *err) {
    if (seq < 0 || seq >= c->n_seq) return nx_fail(err, "kv cache: sequence %d out of range (n_seq %d)", seq, c->n_seq);
    if (n < 0 || n > c->n_ctx) return nx_fail(err, "kv cache: %d cells do not fit (n_ctx %d)", n, c->n_ctx);
    const size_t bytes = (size_t)n * (size_t)c->kv_dim * c->elt;
    for (int l = 0; l < c->n_layer; l++) {
        memcpy(c->k + nx_kv_offset(c, l, seq, 0), k + (size_t)l * bytes, bytes);
        memcpy(c->v + nx_kv_offset(c, l, seq, 0), v + (size_t)l * bytes, bytes);
    }
    c->len[seq] = n;
    return true;
}
