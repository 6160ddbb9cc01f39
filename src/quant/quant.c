/* quant.c - the type-traits table, type names, row sizes and kernel dispatch.
 *
 * One row per format.  Rows with only name/block_size/type_size ("size-only") describe formats
 * GGUF files may contain that the engine can list and skip but not compute with: their
 * to_float / from_float are NULL, and nx_type_get() still returns them (callers that need to
 * compute check to_float).  Ids with no row have a NULL name and are unknown.
 */
#include "quant/quant_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "gguf/gguf_types.h"

/* The compute table takes name, block size and bytes per block from gguf_types.h; the block
 * structs and block sizes the kernels use must match them. */
#define LAYOUT(T) .name = NX_GGUF_NAME(T), .block_size = NX_GGUF_BLOCK(T), .type_size = NX_GGUF_BYTES(T)
#define SAME_LAYOUT(T, block, bytes)                                                                 \
    _Static_assert(NX_GGUF_ID(T) == NX_TYPE_##T && NX_GGUF_BLOCK(T) == (block) && NX_GGUF_BYTES(T) == (bytes), \
                   #T " differs from gguf_types.h")
SAME_LAYOUT(F32, 1, sizeof(float));
SAME_LAYOUT(F16, 1, sizeof(uint16_t));
SAME_LAYOUT(BF16, 1, sizeof(uint16_t));
SAME_LAYOUT(Q4_0, NX_QK, sizeof(nx_block_q4_0));
SAME_LAYOUT(Q4_1, NX_QK, sizeof(nx_block_q4_1));
SAME_LAYOUT(Q5_0, NX_QK, sizeof(nx_block_q5_0));
SAME_LAYOUT(Q5_1, NX_QK, sizeof(nx_block_q5_1));
SAME_LAYOUT(Q8_0, NX_QK, sizeof(nx_block_q8_0));
SAME_LAYOUT(Q4_K, NX_QK_K, sizeof(nx_block_q4_K));
SAME_LAYOUT(Q5_K, NX_QK_K, sizeof(nx_block_q5_K));
SAME_LAYOUT(Q6_K, NX_QK_K, sizeof(nx_block_q6_K));
SAME_LAYOUT(Q8_1, NX_QK, sizeof(nx_block_q8_1));
SAME_LAYOUT(Q8_K, NX_QK_K, sizeof(nx_block_q8_K));
SAME_LAYOUT(Q2_K, NX_QK_K, sizeof(nx_block_q2_K));
SAME_LAYOUT(Q3_K, NX_QK_K, sizeof(nx_block_q3_K));
SAME_LAYOUT(IQ4_NL, NX_QK, sizeof(nx_block_iq4_nl));
SAME_LAYOUT(IQ4_XS, NX_QK_K, sizeof(nx_block_iq4_xs));
SAME_LAYOUT(I8, 1, 1);
SAME_LAYOUT(I16, 1, 2);
SAME_LAYOUT(I32, 1, 4);
SAME_LAYOUT(I64, 1, 8);
SAME_LAYOUT(F64, 1, 8);

static const nx_type_traits type_table[NX_TYPE_COUNT] = {
    [NX_TYPE_F32] = {
        LAYOUT(F32), .is_quantized = false,
        .to_float = nx_to_float_f32, .from_float = nx_from_float_f32,
        .vec_dot_type = NX_TYPE_F32,
        .vec_dot = {
            [NX_ISA_SCALAR] = nx_dot_f32_scalar,
#ifdef NX_HAVE_X86_KERNELS
            [NX_ISA_AVX2] = nx_dot_f32_avx2,
            [NX_ISA_AVX512] = nx_dot_f32_avx512,
#endif
        },
    },
    [NX_TYPE_F16] = {
        LAYOUT(F16), .is_quantized = false,
        .to_float = nx_to_float_f16, .from_float = nx_from_float_f16,
        .vec_dot_type = NX_TYPE_F16,
        .vec_dot = {
            [NX_ISA_SCALAR] = nx_dot_f16_scalar,
#ifdef NX_HAVE_X86_KERNELS
            [NX_ISA_AVX2] = nx_dot_f16_avx2,
            [NX_ISA_AVX512] = nx_dot_f16_avx512,
#endif
        },
    },
    [NX_TYPE_BF16] = {
        LAYOUT(BF16), .is_quantized = false,
        .to_float = nx_to_float_bf16, .from_float = nx_from_float_bf16,
        .vec_dot_type = NX_TYPE_BF16,
        .vec_dot = {
            [NX_ISA_SCALAR] = nx_dot_bf16_scalar,
#ifdef NX_HAVE_X86_KERNELS
            [NX_ISA_AVX2] = nx_dot_bf16_avx2,
            [NX_ISA_AVX512] = nx_dot_bf16_avx512,
#endif
        },
    },
    [NX_TYPE_Q4_0] = {
        LAYOUT(Q4_0), .is_quantized = true,
        .to_float = nx_to_float_q4_0, .from_float = nx_from_float_q4_0, .from_float_w = nx_from_float_w_q4_0,
        .vec_dot_type = NX_TYPE_Q8_0,
        .vec_dot = {
            [NX_ISA_SCALAR] = nx_dot_q4_0_scalar,
#ifdef NX_HAVE_X86_KERNELS
            [NX_ISA_AVX2] = nx_dot_q4_0_avx2,
            [NX_ISA_AVX512] = nx_dot_q4_0_avx512,
#endif
        },
    },
    [NX_TYPE_Q4_1] = {
        LAYOUT(Q4_1), .is_quantized = true,
        .to_float = nx_to_float_q4_1, .from_float = nx_from_float_q4_1, .from_float_w = nx_from_float_w_q4_1,
        .vec_dot_type = NX_TYPE_Q8_1,
        .vec_dot = {
            [NX_ISA_SCALAR] = nx_dot_q4_1_scalar,
#ifdef NX_HAVE_X86_KERNELS
            [NX_ISA_AVX2] = nx_dot_q4_1_avx2,
            [NX_ISA_AVX512] = nx_dot_q4_1_avx512,
#endif
        },
    },
    [NX_TYPE_Q5_0] = {
        LAYOUT(Q5_0), .is_quantized = true,
        .to_float = nx_to_float_q5_0, .from_float = nx_from_float_q5_0, .from_float_w = nx_from_float_w_q5_0,
        .vec_dot_type = NX_TYPE_Q8_0,
        .vec_dot = {
            [NX_ISA_SCALAR] = nx_dot_q5_0_scalar,
#ifdef NX_HAVE_X86_KERNELS
            [NX_ISA_AVX2] = nx_dot_q5_0_avx2,
            [NX_ISA_AVX512] = nx_dot_q5_0_avx512,
#endif
        },
    },
    [NX_TYPE_Q5_1] = {
        LAYOUT(Q5_1), .is_quantized = true,
        .to_float = nx_to_float_q5_1, .from_float = nx_from_float_q5_1, .from_float_w = nx_from_float_w_q5_1,
        .vec_dot_type = NX_TYPE_Q8_1,
        .vec_dot = {
            [NX_ISA_SCALAR] = nx_dot_q5_1_scalar,
#ifdef NX_HAVE_X86_KERNELS
            [NX_ISA_AVX2] = nx_dot_q5_1_avx2,
            [NX_ISA_AVX512] = nx_dot_q5_1_avx512,
#endif
        },
    },
    [NX_TYPE_Q8_0] = {
        LAYOUT(Q8_0), .is_quantized = true,
        .to_float = nx_to_float_q8_0, .from_float = nx_from_float_q8_0,
        .vec_dot_type = NX_TYPE_Q8_0,
        .vec_dot = {
            [NX_ISA_SCALAR] = nx_dot_q8_0_scalar,
#ifdef NX_HAVE_X86_KERNELS
            [NX_ISA_AVX2] = nx_dot_q8_0_avx2,
            [NX_ISA_AVX512] = nx_dot_q8_0_avx512,
#endif
        },
#ifdef NX_HAVE_X86_KERNELS
        .prepared = {
            [NX_ISA_AVX512] = {nx_dot_q8_0_prep_avx512, nx_prepare_q8_0_avx512, nx_prep_q8_0_row_bytes,
                               nx_dot_w_q8_0_prep_avx512},
        },
#endif
#ifdef NX_HAVE_X86_KERNELS
        .gemm = {[NX_ISA_AVX512] = &nx_gemm_q8_0_avx512},
#endif
    },
    [NX_TYPE_Q4_K] = {
        LAYOUT(Q4_K), .is_quantized = true,
        .to_float = nx_to_float_q4_K, .from_float = nx_from_float_q4_K, .from_float_w = nx_from_float_w_q4_K,
        .vec_dot_type = NX_TYPE_Q8_K,
        .vec_dot = {
            [NX_ISA_SCALAR] = nx_dot_q4_K_scalar,
#ifdef NX_HAVE_X86_KERNELS
            [NX_ISA_AVX2] = nx_dot_q4_K_avx2,
            [NX_ISA_AVX512] = nx_dot_q4_K_avx512,
#endif
        },
#ifdef NX_HAVE_X86_KERNELS
        .gemm = {[NX_ISA_AVX512] = &nx_gemm_q4_K_avx512},
        .prepared = {
            [NX_ISA_AVX512] = {nx_dot_q4_K_prep_avx512, nx_prepare_q8_K_avx512, nx_prep_q8_K_row_bytes,
                               nx_dot_w_q4_K_prep_avx512, nx_dot_t_q4_K_prep_avx512},
        },
#endif
    },
    [NX_TYPE_Q5_K] = {
        LAYOUT(Q5_K), .is_quantized = true,
        .to_float = nx_to_float_q5_K, .from_float = nx_from_float_q5_K, .from_float_w = nx_from_float_w_q5_K,
        .vec_dot_type = NX_TYPE_Q8_K,
        .vec_dot = {
            [NX_ISA_SCALAR] = nx_dot_q5_K_scalar,
#ifdef NX_HAVE_X86_KERNELS
            [NX_ISA_AVX2] = nx_dot_q5_K_avx2,
            [NX_ISA_AVX512] = nx_dot_q5_K_avx512,
#endif
        },
#ifdef NX_HAVE_X86_KERNELS
        .gemm = {[NX_ISA_AVX512] = &nx_gemm_q5_K_avx512},
        .prepared = {
            [NX_ISA_AVX512] = {nx_dot_q5_K_prep_avx512, nx_prepare_q8_K_avx512, nx_prep_q8_K_row_bytes,
                               nx_dot_w_q5_K_prep_avx512, nx_dot_t_q5_K_prep_avx512},
        },
#endif
    },
    [NX_TYPE_Q6_K] = {
        LAYOUT(Q6_K), .is_quantized = true,
        .to_float = nx_to_float_q6_K, .from_float = nx_from_float_q6_K, .from_float_w = nx_from_float_w_q6_K,
        .vec_dot_type = NX_TYPE_Q8_K,
        .vec_dot = {
            [NX_ISA_SCALAR] = nx_dot_q6_K_scalar,
#ifdef NX_HAVE_X86_KERNELS
            [NX_ISA_AVX2] = nx_dot_q6_K_avx2,
            [NX_ISA_AVX512] = nx_dot_q6_K_avx512,
#endif
        },
#ifdef NX_HAVE_X86_KERNELS
        .gemm = {[NX_ISA_AVX512] = &nx_gemm_q6_K_avx512},
        .prepared = {
            [NX_ISA_AVX512] = {nx_dot_q6_K_prep_avx512, nx_prepare_q8_K_q6_avx512, nx_prep_q8_K_q6_row_bytes,
                               nx_dot_w_q6_K_prep_avx512, nx_dot_t_q6_K_prep_avx512},
        },
#endif
    },
    /* activation-only formats (the vec-dot types of others): convertible, no dot of their own */
    [NX_TYPE_Q8_1] = {
        LAYOUT(Q8_1), .is_quantized = true,
        .to_float = nx_to_float_q8_1, .from_float = nx_from_float_q8_1,
        .vec_dot_type = NX_TYPE_Q8_1,
    },
    [NX_TYPE_Q8_K] = {
        LAYOUT(Q8_K), .is_quantized = true,
        .to_float = nx_to_float_q8_K, .from_float = nx_from_float_q8_K,
        .vec_dot_type = NX_TYPE_Q8_K,
    },
    [NX_TYPE_Q2_K] = {
        LAYOUT(Q2_K), .is_quantized = true,
        .to_float = nx_to_float_q2_K, .from_float = nx_from_float_q2_K, .from_float_w = nx_from_float_w_q2_K,
        .vec_dot_type = NX_TYPE_Q8_K,
        .vec_dot = {
            [NX_ISA_SCALAR] = nx_dot_q2_K_scalar,
#ifdef NX_HAVE_X86_KERNELS
            [NX_ISA_AVX2] = nx_dot_q2_K_avx2,
            [NX_ISA_AVX512] = nx_dot_q2_K_avx512,
#endif
        },
#ifdef NX_HAVE_X86_KERNELS
        .gemm = {[NX_ISA_AVX512] = &nx_gemm_q2_K_avx512},
#endif
    },
    [NX_TYPE_Q3_K] = {
        LAYOUT(Q3_K), .is_quantized = true,
        .to_float = nx_to_float_q3_K, .from_float = nx_from_float_q3_K, .from_float_w = nx_from_float_w_q3_K,
        .vec_dot_type = NX_TYPE_Q8_K,
        .vec_dot = {
            [NX_ISA_SCALAR] = nx_dot_q3_K_scalar,
#ifdef NX_HAVE_X86_KERNELS
            [NX_ISA_AVX2] = nx_dot_q3_K_avx2,
            [NX_ISA_AVX512] = nx_dot_q3_K_avx512,
#endif
        },
#ifdef NX_HAVE_X86_KERNELS
        .gemm = {[NX_ISA_AVX512] = &nx_gemm_q3_K_avx512},
#endif
    },
    [NX_TYPE_IQ4_NL] = {
        LAYOUT(IQ4_NL), .is_quantized = true,
        .to_float = nx_to_float_iq4_nl, .from_float = nx_from_float_iq4_nl, .from_float_w = nx_from_float_w_iq4_nl,
        .vec_dot_type = NX_TYPE_Q8_0,
        .vec_dot = {
            [NX_ISA_SCALAR] = nx_dot_iq4_nl_scalar,
#ifdef NX_HAVE_X86_KERNELS
            [NX_ISA_AVX2] = nx_dot_iq4_nl_avx2,
            [NX_ISA_AVX512] = nx_dot_iq4_nl_avx512,
#endif
        },
    },
    [NX_TYPE_IQ4_XS] = {
        LAYOUT(IQ4_XS), .is_quantized = true,
        .to_float = nx_to_float_iq4_xs, .from_float = nx_from_float_iq4_xs, .from_float_w = nx_from_float_w_iq4_xs,
        .vec_dot_type = NX_TYPE_Q8_K,
        .vec_dot = {
            [NX_ISA_SCALAR] = nx_dot_iq4_xs_scalar,
#ifdef NX_HAVE_X86_KERNELS
            [NX_ISA_AVX2] = nx_dot_iq4_xs_avx2,
            [NX_ISA_AVX512] = nx_dot_iq4_xs_avx512,
#endif
        },
#ifdef NX_HAVE_X86_KERNELS
        .gemm = {[NX_ISA_AVX512] = &nx_gemm_iq4_xs_avx512},
#endif
    },
    /* size-only rows: GGUF files with these can be listed, not computed with */
    [NX_TYPE_I8] = {
        LAYOUT(I8), .is_quantized = false,
        .vec_dot_type = NX_TYPE_I8,
    },
    [NX_TYPE_I16] = {
        LAYOUT(I16), .is_quantized = false,
        .vec_dot_type = NX_TYPE_I16,
    },
    [NX_TYPE_I32] = {
        LAYOUT(I32), .is_quantized = false,
        .vec_dot_type = NX_TYPE_I32,
    },
    [NX_TYPE_I64] = {
        LAYOUT(I64), .is_quantized = false,
        .vec_dot_type = NX_TYPE_I64,
    },
    [NX_TYPE_F64] = {
        LAYOUT(F64), .is_quantized = false,
        .vec_dot_type = NX_TYPE_F64,
    },
};

const nx_type_traits *nx_type_get(uint32_t type) {
    if (type >= NX_TYPE_COUNT || !type_table[type].name) return NULL;
    return &type_table[type];
}

const char *nx_type_name(uint32_t type) {
    const nx_type_traits *t = nx_type_get(type);
    if (t) return t->name;
    static _Thread_local char buf[32]; /* per thread, so concurrent callers do not clash */
    snprintf(buf, sizeof buf, "unknown(%u)", type);
    return buf;
}

bool nx_type_from_name(const char *name, nx_type *out) {
    if (!name) return false;
    for (uint32_t i = 0; i < NX_TYPE_COUNT; i++) {
        if (type_table[i].name && strcasecmp(type_table[i].name, name) == 0) {
            if (out) *out = (nx_type)i;
            return true;
        }
    }
    return false;
}

bool nx_row_size(uint32_t type, int64_t n, size_t *out, nx_err *err) {
    const nx_type_traits *t = nx_type_get(type);
    if (!t) return nx_fail(err, "unknown tensor type id %u", type);
    if (n < 0) return nx_fail(err, "negative row length %lld for type %s", (long long)n, t->name);
    if (n % t->block_size != 0)
        return nx_fail(err, "row length %lld is not a multiple of the %s block size %lld", (long long)n, t->name,
                       (long long)t->block_size);
    uint64_t bytes;
    if (!nx_mul_ok((uint64_t)(n / t->block_size), t->type_size, &bytes) || bytes > SIZE_MAX)
        return nx_fail(err, "row of %lld %s elements is too large", (long long)n, t->name);
    *out = (size_t)bytes;
    return true;
}

bool nx_dot_plan_for(uint32_t type, nx_isa isa, int64_t n, nx_dot_plan *plan, nx_err *err) {
    const nx_type_traits *t = nx_type_get(type);
    if (!t) return nx_fail(err, "unknown tensor type id %u", type);
    size_t wrow;
    if (!nx_row_size(type, n, &wrow, err)) return false;
    memset(plan, 0, sizeof *plan);
    for (int i = NX_MIN((int)isa, NX_ISA_COUNT - 1); i >= 0; i--) {
        if (t->prepared[i].dot) {
            plan->dot = t->prepared[i].dot;
            plan->dot_w = t->prepared[i].dot_w;
            plan->dot_tile = t->prepared[i].dot_tile;
            plan->act_from_float = t->prepared[i].prepare;
            plan->act_row_bytes = t->prepared[i].row_bytes(n);
            return true;
        }
        if (t->vec_dot[i]) {
            plan->dot = t->vec_dot[i];
            if (t->vec_dot_type == NX_TYPE_F32) {
                plan->act_as_is = true;
                plan->act_row_bytes = (size_t)n * sizeof(float);
                return true;
            }
            plan->act_from_float = nx_type_get(t->vec_dot_type)->from_float;
            return nx_row_size(t->vec_dot_type, n, &plan->act_row_bytes, err);
        }
    }
    return nx_fail(err, "type %s has no dot kernel", t->name);
}

nx_vec_dot_fn nx_vec_dot_for(uint32_t type, nx_isa isa) {
    const nx_type_traits *t = nx_type_get(type);
    if (!t) return NULL;
    for (int i = (int)isa; i >= 0; i--) {
        if (i < NX_ISA_COUNT && t->vec_dot[i]) return t->vec_dot[i];
    }
    return NULL;
}
