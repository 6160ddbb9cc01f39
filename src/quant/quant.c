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


static const nx_type_traits type_table[NX_TYPE_COUNT] = {
    [NX_TYPE_F32] = {
        .name = "f32", .block_size = 1, .type_size = sizeof(float), .is_quantized = false,
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
        .name = "f16", .block_size = 1, .type_size = sizeof(uint16_t), .is_quantized = false,
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
        .name = "bf16", .block_size = 1, .type_size = sizeof(uint16_t), .is_quantized = false,
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
        .name = "q4_0", .block_size = NX_QK, .type_size = sizeof(nx_block_q4_0), .is_quantized = true,
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
        .name = "q4_1", .block_size = NX_QK, .type_size = sizeof(nx_block_q4_1), .is_quantized = true,
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
        .name = "q5_0", .block_size = NX_QK, .type_size = sizeof(nx_block_q5_0), .is_quantized = true,
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
        .name = "q5_1", .block_size = NX_QK, .type_size = sizeof(nx_block_q5_1), .is_quantized = true,
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
        .name = "q8_0", .block_size = NX_QK, .type_size = sizeof(nx_block_q8_0), .is_quantized = true,
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
        .name = "q4_K", .block_size = NX_QK_K, .type_size = sizeof(nx_block_q4_K), .is_quantized = true,
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
        .name = "q5_K", .block_size = NX_QK_K, .type_size = sizeof(nx_block_q5_K), .is_quantized = true,
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
        .name = "q6_K", .block_size = NX_QK_K, .type_size = sizeof(nx_block_q6_K), .is_quantized = true,
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
        .name = "q8_1", .block_size = NX_QK, .type_size = sizeof(nx_block_q8_1), .is_quantized = true,
        .to_float = nx_to_float_q8_1, .from_float = nx_from_float_q8_1,
        .vec_dot_type = NX_TYPE_Q8_1,
    },
    [NX_TYPE_Q8_K] = {
        .name = "q8_K", .block_size = NX_QK_K, .type_size = sizeof(nx_block_q8_K), .is_quantized = true,
        .to_float = nx_to_float_q8_K, .from_float = nx_from_float_q8_K,
        .vec_dot_type = NX_TYPE_Q8_K,
    },
    [NX_TYPE_Q2_K] = {
        .name = "q2_K", .block_size = NX_QK_K, .type_size = sizeof(nx_block_q2_K), .is_quantized = true,
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
        .name = "q3_K", .block_size = NX_QK_K, .type_size = sizeof(nx_block_q3_K), .is_quantized = true,
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
        .name = "iq4_nl", .block_size = NX_QK, .type_size = sizeof(nx_block_iq4_nl), .is_quantized = true,
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
        .name = "iq4_xs", .block_size = NX_QK_K, .type_size = sizeof(nx_block_iq4_xs), .is_quantized = true,
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
        .name = "i8", .block_size = 1, .type_size = 1, .is_quantized = false,
        .vec_dot_type = NX_TYPE_I8,
    },
    [NX_TYPE_I16] = {
        .name = "i16", .block_size = 1, .type_size = 2, .is_quantized = false,
        .vec_dot_type = NX_TYPE_I16,
    },
    [NX_TYPE_I32] = {
        .name = "i32", .block_size = 1, .type_size = 4, .is_quantized = false,
        .vec_dot_type = NX_TYPE_I32,
    },
    [NX_TYPE_I64] = {
        .name = "i64", .block_size = 1, .type_size = 8, .is_quantized = false,
        .vec_dot_type = NX_TYPE_I64,
    },
    [NX_TYPE_F64] = {
        .name = "f64", .block_size = 1, .type_size = 8, .is_quantized = false,
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
