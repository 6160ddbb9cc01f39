/* kv_cache.h - attention K/V cache: per trunk attention layer, per sequence, one cell per position.
 *
 * Layout: k and v are [layer][seq][n_ctx][kv_dim] in their cache types (each F16 default, F32,
 * Q8_0 or Q4_0), kv_dim = Hkv * D.  A cell is one position's K (or V) row of kv_dim elements; in
 * the quantized types it is kv_dim / 32 blocks of 32 consecutive elements (ggml's block_q8_0 /
 * block_q4_0, quantized by the type-traits from_float), so a head's D values are D / 32 whole
 * blocks when D % 32 == 0 (checked at context creation) and every cell stays independent of its
 * neighbours: storing, truncating or copying cells works exactly as for F16.  Cell p of a sequence holds the (post-norm, post-RoPE) key and the value of
 * the token at position p, so positions of a sequence must be 0, 1, 2, ... without gaps: the
 * forward pass appends at len[seq] and attention reads cells 0..pos.  Cells >= len[seq] are
 * stale and never read.  Memory is allocated once (n_ctx x n_seq), untouched pages cost nothing.
 * len[] changes only through nx_kv_commit / nx_kv_truncate / nx_kv_copy / nx_kv_import.
 */
#ifndef NX_KV_CACHE_H
#define NX_KV_CACHE_H

#include "base/common.h"

typedef enum nx_kv_type { NX_KV_F16 = 0, NX_KV_F32 = 1, NX_KV_Q8_0 = 2, NX_KV_Q4_0 = 3 } nx_kv_type;
#define NX_KV_TYPE_COUNT 4

typedef struct nx_kv_cache {
    int n_layer, n_seq, n_ctx, kv_dim;
    nx_kv_type type_k, type_v;
    size_t row_k, row_v; /* bytes of one cell (kv_dim elements) of k and of v */
    uint8_t *k, *v;
    int32_t *len;      /* [n_seq] valid cells (= positions decoded) per sequence */
} nx_kv_cache;

bool   nx_kv_init(nx_kv_cache *c, int n_layer, int kv_dim, int n_ctx, int n_seq, nx_kv_type type_k,
                  nx_kv_type type_v, nx_err *err);
void   nx_kv_free(nx_kv_cache *c);
size_t nx_kv_bytes(const nx_kv_cache *c);
const char *nx_kv_type_name(nx_kv_type t); /* "f16", "f32", "q8_0", "q4_0"; "?" when out of range */
const char *const *nx_kv_type_names(void); /* all of them in nx_kv_type order, then NULL */
bool nx_kv_type_valid(int t);
/* Elements per block of the type (1 for F16/F32, 32 for Q8_0/Q4_0): a head's D must be a multiple. */
int nx_kv_type_block(nx_kv_type t);
/* Bytes of n elements in the type (n a multiple of nx_kv_type_block). */
size_t nx_kv_type_bytes(nx_kv_type t, size_t n);
/* The quant.h type id (NX_TYPE_F16, NX_TYPE_F32, NX_TYPE_Q8_0, NX_TYPE_Q4_0). */
uint32_t nx_kv_type_qtype(nx_kv_type t);
/* Converts n floats (a multiple of the block) to the type: the type-traits from_float. */
void nx_kv_type_from_float(nx_kv_type t, const float *src, uint8_t *dst, int n);
/* Exact dequantisation of n elements (a multiple of the block): the type-traits to_float. */
void nx_kv_type_to_float(nx_kv_type t, const uint8_t *src, float *dst, int n);

static inline size_t nx_kv_cell_index(const nx_kv_cache *c, int layer, int seq, int pos) {
    return (((size_t)layer * (size_t)c->n_seq + (size_t)seq) * (size_t)c->n_ctx) + (size_t)pos;
}
/* Byte offsets of cell (layer, seq, pos) in k and in v. */
static inline size_t nx_kv_offset_k(const nx_kv_cache *c, int layer, int seq, int pos) {
    return nx_kv_cell_index(c, layer, seq, pos) * c->row_k;
}
static inline size_t nx_kv_offset_v(const nx_kv_cache *c, int layer, int seq, int pos) {
    return nx_kv_cell_index(c, layer, seq, pos) * c->row_v;
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
/* Cells [0, n) of seq, every layer, as stored (cache types): buffers of nx_kv_cells_bytes_k(c, n)
 * bytes for k and nx_kv_cells_bytes_v(c, n) for v, laid out [layer][n][kv_dim].  Export needs n <= len[seq]; import
 * writes cells [0, n) and sets len[seq] = n. */
size_t nx_kv_cells_bytes_k(const nx_kv_cache *c, int32_t n);
size_t nx_kv_cells_bytes_v(const nx_kv_cache *c, int32_t n);
bool nx_kv_export(const nx_kv_cache *c, int seq, int32_t n, uint8_t *k, uint8_t *v, nx_err *err);
bool nx_kv_import(nx_kv_cache *c, int seq, int32_t n, const uint8_t *k, const uint8_t *v, nx_err *err);

#endif
