/* quant.h - tensor element formats: one type-traits table, GGUF-identical block layouts.
 *
 * Type ids are ggml's (they are what GGUF stores).  Every format is described by one row of
 * the table in quant.c: block size, bytes per block, to-float, reference from-float, the
 * activation ("vec-dot") type its dot product consumes, and the dot kernels per ISA.  Code
 * elsewhere never switches on the type: it asks the table.
 *
 * Dot kernels are multi-row: one weight row against `nrows` activation rows (already in the
 * vec-dot type), so a batch of T tokens decodes each weight block once per group of rows.
 * This is what makes a 4-row verification batch cost about as much as one row.
 */
#ifndef NX_QUANT_H
#define NX_QUANT_H

#include "base/common.h"
#include "base/cpu.h" /* nx_isa: the kernels per level */

typedef enum nx_type {
    NX_TYPE_F32 = 0, NX_TYPE_F16 = 1, NX_TYPE_Q4_0 = 2, NX_TYPE_Q4_1 = 3,
    NX_TYPE_Q5_0 = 6, NX_TYPE_Q5_1 = 7, NX_TYPE_Q8_0 = 8, NX_TYPE_Q8_1 = 9,
    NX_TYPE_Q2_K = 10, NX_TYPE_Q3_K = 11, NX_TYPE_Q4_K = 12, NX_TYPE_Q5_K = 13,
    NX_TYPE_Q6_K = 14, NX_TYPE_Q8_K = 15, NX_TYPE_IQ4_NL = 20, NX_TYPE_IQ4_XS = 23,
    NX_TYPE_I8 = 24, NX_TYPE_I16 = 25, NX_TYPE_I32 = 26, NX_TYPE_I64 = 27, NX_TYPE_F64 = 28,
    NX_TYPE_BF16 = 30,
    NX_TYPE_COUNT = 40 /* ids below this may be described; unknown ids have a NULL name */
} nx_type;

/* out[r] = dot(w_row, x + r * x_stride_bytes) for r in [0, nrows); n = elements per row
 * (multiple of the block size); w_row in this type, x rows in the vec-dot type. */
typedef void (*nx_vec_dot_fn)(int64_t n, float *out, const void *w_row,
                              const void *x, size_t x_stride_bytes, int nrows);
/* out[m] = dot(w + m * w_stride_bytes, x) for m in [0, nw): several weight rows against ONE
 * activation row (decode); each out[m] bit-identical to the one-row kernel it goes with
 * (nx_prepared_dot.dot with nrows = 1). */
typedef void (*nx_vec_dot_w_fn)(int64_t n, float *out, const void *w, size_t w_stride_bytes, const void *x, int nw);
/* out[r * out_stride + m] = dot(w + m * w_stride_bytes, x + r * x_stride_bytes) for m in [0, nw),
 * r in [0, nrows): a tile of several weight rows against several activation rows (a verify
 * batch); each result bit-identical to the one-row kernel it goes with. */
typedef void (*nx_vec_dot_tile_fn)(int64_t n, float *out, size_t out_stride, const void *w, size_t w_stride_bytes,
                                   int nw, const void *x, size_t x_stride_bytes, int nrows);
typedef void (*nx_to_float_fn)(const void *src, float *dst, int64_t n);
typedef void (*nx_from_float_fn)(const float *src, void *dst, int64_t n);
/* Quantises ONE row of n elements with per-column importance weights qw[n] (>= 0; an
 * importance matrix's mean squared activations), as GGUF model files are made with an imatrix. */
typedef void (*nx_from_float_w_fn)(const float *src, void *dst, int64_t n, const float *qw);
typedef size_t (*nx_row_bytes_fn)(int64_t n);

/* A kernel on "prepared" activations: some SIMD kernels run faster when the activation rows
 * are laid out for them (e.g. the q8_0 AVX-512 kernel wants codes without interleaved scales
 * and precomputed sums, see quant_avx512.c).  `prepare` turns a row of n floats into that
 * layout (row_bytes(n) bytes; the kernel's x_stride is at least that); the codes and scales
 * it holds are exactly those of the vec-dot type's from_float, so the result is the plain
 * kernel's up to float summation order. */
typedef struct nx_prepared_dot {
    nx_vec_dot_fn dot;
    nx_from_float_fn prepare;
    nx_row_bytes_fn row_bytes;
    nx_vec_dot_w_fn dot_w; /* optional: several weight rows against one activation row */
    nx_vec_dot_tile_fn dot_tile; /* optional: several weight rows against several activation rows */
} nx_prepared_dot;

struct nx_gemm_ops; /* gemm.h */

typedef struct nx_type_traits {
    const char *name;            /* "q4_K" etc. as ggml names it; NULL = unsupported id */
    int64_t block_size;          /* elements per block (1 for plain types) */
    size_t type_size;            /* bytes per block */
    bool is_quantized;
    nx_to_float_fn to_float;     /* exact dequantisation */
    nx_from_float_fn from_float; /* reference quantiser (also used for activations) */
    /* the model-file quantiser with an importance matrix (quant_convert_imatrix.c); NULL: the
     * format ignores importance weights (from_float is used) */
    nx_from_float_w_fn from_float_w;
    nx_type vec_dot_type;        /* format the activation row must be in for vec_dot */
    nx_vec_dot_fn vec_dot[NX_ISA_COUNT]; /* NULL entries fall back to the next lower ISA */
    nx_prepared_dot prepared[NX_ISA_COUNT]; /* optional; preferred over vec_dot at the same ISA */
    /* optional GEMM micro-kernels for large batches (gemm.h), bit-identical per row to this
     * ISA's vec_dot / prepared kernel */
    const struct nx_gemm_ops *gemm[NX_ISA_COUNT];
} nx_type_traits;

const nx_type_traits *nx_type_get(uint32_t type);      /* NULL if unknown/unsupported */
const char *nx_type_name(uint32_t type);               /* "unknown(N)" for unknown ids */
bool nx_type_from_name(const char *name, nx_type *out); /* case-insensitive: "q4_k", "F16" */
/* Bytes of a row of n elements; fails if n is not a multiple of the block size. */
bool nx_row_size(uint32_t type, int64_t n, size_t *out, nx_err *err);

/* The dot kernel actually used for `type` at `isa` (falls back to lower ISAs). */
nx_vec_dot_fn nx_vec_dot_for(uint32_t type, nx_isa isa);

/* What a matmul runs for `type` at `isa` on rows of n elements: the kernel and how to convert
 * an activation row for it.  act_as_is: the kernel reads the float rows directly (f32
 * weights; act_from_float is NULL).  Otherwise act_from_float converts a row of n floats into
 * act_row_bytes bytes (the vec-dot type's from_float, or a prepared layout). */
typedef struct nx_dot_plan {
    nx_vec_dot_fn dot;
    nx_vec_dot_w_fn dot_w; /* NULL, or several weight rows against one activation row (T = 1) */
    nx_vec_dot_tile_fn dot_tile; /* NULL, or several weight rows against several activation rows */
    nx_from_float_fn act_from_float;
    size_t act_row_bytes;
    bool act_as_is;
} nx_dot_plan;
/* Fails (with a message) for unknown types, types without a kernel, or a bad n. */
bool nx_dot_plan_for(uint32_t type, nx_isa isa, int64_t n, nx_dot_plan *plan, nx_err *err);

/* Half-precision helpers (IEEE binary16 and bfloat16, round-to-nearest-even like ggml). */
float    nx_f16_to_f32(uint16_t h);
uint16_t nx_f32_to_f16(float f);
float    nx_bf16_to_f32(uint16_t h);
uint16_t nx_f32_to_bf16(float f);

#endif
