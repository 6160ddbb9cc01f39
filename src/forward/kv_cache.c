/* kv_cache.c - attention K/V cache storage, truncation and copy. */
#include "forward/kv_cache.h"

#include <stdlib.h>
#include <string.h>

#include "gguf/gguf_types.h"
#include "quant/quant.h"

/* The cache types, in nx_kv_type order: each is a tensor type, whose name (gguf_types.h) it
 * takes.  The only list of them: the CLI's choices and the API's names come from kv_names. */
#define KV_TYPES(X) X(F16) X(F32) X(Q8_0) X(Q4_0)
#define KV_NAME(T) NX_GGUF_NAME(T),
#define KV_QTYPE(T) NX_TYPE_##T,
#define KV_INDEX(T) KV_INDEX_##T,
#define KV_SAME(T) _Static_assert(KV_INDEX_##T == (int)NX_KV_##T, "KV_TYPES is in nx_kv_type order");
enum { KV_TYPES(KV_INDEX) KV_INDEX_COUNT };
KV_TYPES(KV_SAME)
_Static_assert(KV_INDEX_COUNT == NX_KV_TYPE_COUNT, "KV_TYPES lists every nx_kv_type");
static const char *const kv_names[NX_KV_TYPE_COUNT + 1] = {KV_TYPES(KV_NAME) NULL};
static const uint32_t kv_qtypes[NX_KV_TYPE_COUNT] = {KV_TYPES(KV_QTYPE)};

bool nx_kv_type_valid(int t) { return t >= 0 && t < NX_KV_TYPE_COUNT; }
const char *nx_kv_type_name(nx_kv_type t) { return nx_kv_type_valid((int)t) ? kv_names[t] : "?"; }
const char *const *nx_kv_type_names(void) { return kv_names; }
uint32_t nx_kv_type_qtype(nx_kv_type t) { return kv_qtypes[t]; }
int nx_kv_type_block(nx_kv_type t) { return (int)nx_type_get(kv_qtypes[t])->block_size; }

size_t nx_kv_type_bytes(nx_kv_type t, size_t n) {
    const nx_type_traits *tt = nx_type_get(kv_qtypes[t]);
    return n / (size_t)tt->block_size * tt->type_size;
}

void nx_kv_type_from_float(nx_kv_type t, const float *src, uint8_t *dst, int n) {
    switch (t) {
    case NX_KV_F32: memcpy(dst, src, (size_t)n * sizeof(float)); break;
    case NX_KV_F16:
        for (int i = 0; i < n; i++) ((uint16_t *)dst)[i] = nx_f32_to_f16(src[i]);
        break;
    default: nx_type_get(kv_qtypes[t])->from_float(src, dst, n); break;
    }
}

void nx_kv_type_to_float(nx_kv_type t, const uint8_t *src, float *dst, int n) {
    switch (t) {
    case NX_KV_F32: memcpy(dst, src, (size_t)n * sizeof(float)); break;
    case NX_KV_F16:
        for (int i = 0; i < n; i++) dst[i] = nx_f16_to_f32(((const uint16_t *)src)[i]);
        break;
    default: nx_type_get(kv_qtypes[t])->to_float(src, dst, n); break;
    }
}

bool nx_kv_init(nx_kv_cache *c, int n_layer, int kv_dim, int n_ctx, int n_seq, nx_kv_type type_k,
                nx_kv_type type_v, nx_err *err) {
    memset(c, 0, sizeof *c);
    if (n_ctx <= 0 || n_seq <= 0 || kv_dim <= 0 || n_layer < 0)
        return nx_fail(err, "kv cache: invalid size (n_ctx %d, n_seq %d, kv_dim %d)", n_ctx, n_seq, kv_dim);
    if (!nx_kv_type_valid((int)type_k) || !nx_kv_type_valid((int)type_v))
        return nx_fail(err, "kv cache: unknown cache type (k %d, v %d)", (int)type_k, (int)type_v);
    if (kv_dim % nx_kv_type_block(type_k) || kv_dim % nx_kv_type_block(type_v))
        return nx_fail(err, "kv cache: kv_dim %d is not a multiple of the %s/%s block", kv_dim, nx_kv_type_name(type_k),
                       nx_kv_type_name(type_v));
    c->n_layer = n_layer;
    c->n_seq = n_seq;
    c->n_ctx = n_ctx;
    c->kv_dim = kv_dim;
    c->type_k = type_k;
    c->type_v = type_v;
    c->row_k = nx_kv_type_bytes(type_k, (size_t)kv_dim);
    c->row_v = nx_kv_type_bytes(type_v, (size_t)kv_dim);
    uint64_t cells, nk, nv;
    if (!nx_mul_ok((uint64_t)n_layer * (uint64_t)n_seq, (uint64_t)n_ctx, &cells) || !nx_mul_ok(cells, c->row_k, &nk) ||
        !nx_mul_ok(cells, c->row_v, &nv) || nk > SIZE_MAX / 4 || nv > SIZE_MAX / 4)
        return nx_fail(err, "kv cache: size overflow (n_ctx %d x n_seq %d)", n_ctx, n_seq);
    /* calloc: large blocks come from mmap as untouched zero pages, so cells never used cost no
     * resident memory (aligned_alloc + memset would touch all of them) */
    c->k = nx_calloc(1, nk ? nk : 64, "kv cache keys", err);
    c->v = c->k ? nx_calloc(1, nv ? nv : 64, "kv cache values", err) : NULL;
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
    return (size_t)c->n_layer * (size_t)c->n_seq * (size_t)c->n_ctx * (c->row_k + c->row_v);
}

void nx_kv_store(nx_kv_cache *c, int layer, int seq, int pos, const float *k, const float *v) {
    nx_kv_type_from_float(c->type_k, k, c->k + nx_kv_offset_k(c, layer, seq, pos), c->kv_dim);
    nx_kv_type_from_float(c->type_v, v, c->v + nx_kv_offset_v(c, layer, seq, pos), c->kv_dim);
}

void nx_kv_commit(nx_kv_cache *c, int seq, int32_t n) { c->len[seq] += n; }

void nx_kv_truncate(nx_kv_cache *c, int seq, int32_t from_pos) {
    if (from_pos < c->len[seq]) c->len[seq] = from_pos;
}

bool nx_kv_copy(nx_kv_cache *c, int src, int dst, nx_err *err) {
    if (src < 0 || src >= c->n_seq || dst < 0 || dst >= c->n_seq)
        return nx_fail(err, "kv cache: sequence copy %d -> %d out of range (n_seq %d)", src, dst, c->n_seq);
    if (src == dst) return true;
    const size_t bk = (size_t)c->len[src] * c->row_k, bv = (size_t)c->len[src] * c->row_v;
    for (int l = 0; l < c->n_layer; l++) {
        memcpy(c->k + nx_kv_offset_k(c, l, dst, 0), c->k + nx_kv_offset_k(c, l, src, 0), bk);
        memcpy(c->v + nx_kv_offset_v(c, l, dst, 0), c->v + nx_kv_offset_v(c, l, src, 0), bv);
    }
    c->len[dst] = c->len[src];
    return true;
}

/* Cells [0, n) of seq, every layer, in the cache types: [layer][n][kv_dim] for k and for v. */
size_t nx_kv_cells_bytes_k(const nx_kv_cache *c, int32_t n) { return (size_t)c->n_layer * (size_t)n * c->row_k; }
size_t nx_kv_cells_bytes_v(const nx_kv_cache *c, int32_t n) { return (size_t)c->n_layer * (size_t)n * c->row_v; }

bool nx_kv_export(const nx_kv_cache *c, int seq, int32_t n, uint8_t *k, uint8_t *v, nx_err *err) {
    if (seq < 0 || seq >= c->n_seq) return nx_fail(err, "kv cache: sequence %d out of range (n_seq %d)", seq, c->n_seq);
    if (n < 0 || n > c->len[seq])
        return nx_fail(err, "kv cache: sequence %d holds %d cells, %d asked", seq, c->len[seq], n);
    const size_t bk = (size_t)n * c->row_k, bv = (size_t)n * c->row_v;
    for (int l = 0; l < c->n_layer; l++) {
        memcpy(k + (size_t)l * bk, c->k + nx_kv_offset_k(c, l, seq, 0), bk);
        memcpy(v + (size_t)l * bv, c->v + nx_kv_offset_v(c, l, seq, 0), bv);
    }
    return true;
}

bool nx_kv_import(nx_kv_cache *c, int seq, int32_t n, const uint8_t *k, const uint8_t *v, nx_err *err) {
    if (seq < 0 || seq >= c->n_seq) return nx_fail(err, "kv cache: sequence %d out of range (n_seq %d)", seq, c->n_seq);
    if (n < 0 || n > c->n_ctx) return nx_fail(err, "kv cache: %d cells do not fit (n_ctx %d)", n, c->n_ctx);
    const size_t bk = (size_t)n * c->row_k, bv = (size_t)n * c->row_v;
    for (int l = 0; l < c->n_layer; l++) {
        memcpy(c->k + nx_kv_offset_k(c, l, seq, 0), k + (size_t)l * bk, bk);
        memcpy(c->v + nx_kv_offset_v(c, l, seq, 0), v + (size_t)l * bv, bv);
    }
    c->len[seq] = n;
    return true;
}
