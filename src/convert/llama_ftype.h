/* llama_ftype.h - the general.file_type values a GGUF writer stores: llama.cpp's enum llama_ftype
 * (include/llama.h), the ones nextn's converter, quantizer and mkmodel write. */
#ifndef NX_LLAMA_FTYPE_H
#define NX_LLAMA_FTYPE_H

#include "nextn_internal.h"

typedef enum nx_llama_ftype {
    NX_FTYPE_ALL_F32 = 0,
    NX_FTYPE_MOSTLY_F16 = 1,
    NX_FTYPE_MOSTLY_Q4_0 = 2,
    NX_FTYPE_MOSTLY_Q4_1 = 3,
    NX_FTYPE_MOSTLY_Q8_0 = 7,
    NX_FTYPE_MOSTLY_Q5_0 = 8,
    NX_FTYPE_MOSTLY_Q5_1 = 9,
    NX_FTYPE_MOSTLY_Q2_K = 10,
    NX_FTYPE_MOSTLY_Q3_K_S = 11,
    NX_FTYPE_MOSTLY_Q3_K_M = 12,
    NX_FTYPE_MOSTLY_Q3_K_L = 13,
    NX_FTYPE_MOSTLY_Q4_K_S = 14,
    NX_FTYPE_MOSTLY_Q4_K_M = 15,
    NX_FTYPE_MOSTLY_Q5_K_S = 16,
    NX_FTYPE_MOSTLY_Q5_K_M = 17,
    NX_FTYPE_MOSTLY_Q6_K = 18,
    NX_FTYPE_MOSTLY_Q2_K_S = 21,
    NX_FTYPE_MOSTLY_IQ4_NL = 25,
    NX_FTYPE_MOSTLY_IQ4_XS = 30,
    NX_FTYPE_MOSTLY_BF16 = 32,
} nx_llama_ftype;

/* The file type of a file whose matrices are all of `type` (the K formats' "_S" variant, as
 * llama.cpp names a uniform K file); NX_FTYPE_ALL_F32 for F32 and types without one. */
static inline nx_llama_ftype nx_llama_ftype_of(uint32_t type) {
    switch (type) {
    case NX_TYPE_F16: return NX_FTYPE_MOSTLY_F16;
    case NX_TYPE_Q4_0: return NX_FTYPE_MOSTLY_Q4_0;
    case NX_TYPE_Q4_1: return NX_FTYPE_MOSTLY_Q4_1;
    case NX_TYPE_Q8_0: return NX_FTYPE_MOSTLY_Q8_0;
    case NX_TYPE_Q5_0: return NX_FTYPE_MOSTLY_Q5_0;
    case NX_TYPE_Q5_1: return NX_FTYPE_MOSTLY_Q5_1;
    case NX_TYPE_Q2_K: return NX_FTYPE_MOSTLY_Q2_K;
    case NX_TYPE_Q3_K: return NX_FTYPE_MOSTLY_Q3_K_S;
    case NX_TYPE_Q4_K: return NX_FTYPE_MOSTLY_Q4_K_S;
    case NX_TYPE_Q5_K: return NX_FTYPE_MOSTLY_Q5_K_S;
    case NX_TYPE_Q6_K: return NX_FTYPE_MOSTLY_Q6_K;
    case NX_TYPE_IQ4_NL: return NX_FTYPE_MOSTLY_IQ4_NL;
    case NX_TYPE_IQ4_XS: return NX_FTYPE_MOSTLY_IQ4_XS;
    case NX_TYPE_BF16: return NX_FTYPE_MOSTLY_BF16;
    default: return NX_FTYPE_ALL_F32;
    }
}

#endif
