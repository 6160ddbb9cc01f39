/* kv_cache.h - attention K/V cache: per trunk attention layer, per sequence, one cell per position.
 *
 * Layout: k and v are [layer][seq][n_ctx][kv_dim] in the cache type (F16 default, F32 option),
 * kv_dim = Hkv * D.  Cell p of a sequence holds the (post-norm, post-RoPE) key and the value of
 * the token at position p, so positions of a sequence must be 0, 1, 2, ... without gaps: the
 * forward pass appends at len[seq] and attention reads cells 0..pos.  Cells >= len[seq] are
 * stale and never read.  Memory is allocated once (n_ctx x n_seq), untouched pages cost nothing.
 * len[] changes only through nx_kv_commit / nx_kv_truncate / nx_kv_copy / nx_kv_import.
 */
#ifndef NX_KV_CACHE_H
#define NX_KV_CACHE_H

#include "base/common.h"

typedef enum nx_kv_type { NX_KV_F16 = 0, NX_KV_F32 = 1 } nx_kv_type;

typedef struct nx_kv_cache {
    int n_layer, n_seq, n_ctx, kv_dim;
    nx_kv_type type;
    size_t elt;        /* bytes per element */
    uint8_t *k, *v;
    int32_t *len;      /* [n_seq] valid cells (= positions decoded) per sequence */
} nx_kv_cache;

bool   nx_kv_init(nx_kv_cache *c, int n_layer, int kv_dim, int n_ctx, int n_seq, nx_kv_type type, nx_err *err);
void   nx_kv_free(nx_kv_cache *c);
size_t nx_kv_bytes(const nx_kv_cache *c);
const char *nx_kv_type_name(nx_kv_type t);

static inline size_t nx_kv_offset(const nx_kv_cache *c, int layer, int seq, int pos) {
    return ((((size_t)layer * (size_t)c->n_seq + (size_t)seq) * (size_t)c->n_ctx) + (size_t)pos) *
           (size_t)c->kv_dim * c->elt;
}
/* Stores one token's key and value (kv_dim floats each), converting to the cache type. */
void nx_kv_store(nx_kv_cache *c, int layer, int seq, int pos, const float *k, const float *v);

/* Positions decoded (valid cells) of seq. */
static inline int32_t nx_kv_len(const nx_kv_cache *c, int seq) { return c->len[seq]; }
/* The n cells after the current ones of seq were stored (nx_kv_store): they become valid. */
void nx_kv_commit(nx_kv_cache *c, int seq, int32_t n);
/* Forget positions >= from_pos of seq (no-op if already shorter).  seq in range, from_pos >= 0. */
void nx_kv_truncate(nx_kv_cache *c, int seq, int32_t from_pos);
/* dst becomes a copy of src (all layers, cells 0..len-1). */
bool nx_kv_copy(nx_kv_cache *c, int src, int dst, nx_err *err);
/* Cells [0, n) of seq, every layer, as stored (cache type): buffers of nx_kv_cells_bytes(c, n)
 * bytes each for k and v, laid out [layer][n][kv_dim].  Export needs n <= len[seq]; import
 * writes cells [0, n) and sets len[seq] = n. */
size_t nx_kv_cells_bytes(const nx_kv_cache *c, int32_t n);
bool nx_kv_export(const nx_kv_cache *c, int seq, int32_t n, uint8_t *k, uint8_t *v, nx_err *err);
bool nx_kv_import(nx_kv_cache *c, int seq, int32_t n, const uint8_t *k, const uint8_t *v, nx_err *err);

#endif
