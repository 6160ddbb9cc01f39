/* gguf_types.c - storage layout of every ggml tensor type id a GGUF file may carry (the table of
 * gguf_types.h's list), and the size of the metadata value types.
 *
 * The reader needs only (elements per block, bytes per block) to size and bound a tensor, and
 * it must know them for every id llama.cpp can write, including formats nextn cannot compute
 * with (IQ*, TQ*, MXFP4, ...), so that `nextn info` works on any llama.cpp file.  The compute
 * table in quant.c takes the same facts from the same list.
 */
#include "gguf/gguf.h"

#include "gguf/gguf_types.h"

#define ROW(T) [NX_GGUF_ID(T)] = {NX_GGUF_NAME(T), NX_GGUF_BLOCK(T), NX_GGUF_BYTES(T)}
static const nx_gguf_type_layout layouts[] = {
    ROW(F32), ROW(F16), ROW(Q4_0), ROW(Q4_1),
    ROW(Q5_0), ROW(Q5_1), ROW(Q8_0), ROW(Q8_1),
    ROW(Q2_K), ROW(Q3_K), ROW(Q4_K), ROW(Q5_K),
    ROW(Q6_K), ROW(Q8_K), ROW(IQ2_XXS), ROW(IQ2_XS),
    ROW(IQ3_XXS), ROW(IQ1_S), ROW(IQ4_NL), ROW(IQ3_S),
    ROW(IQ2_S), ROW(IQ4_XS), ROW(I8), ROW(I16),
    ROW(I32), ROW(I64), ROW(F64), ROW(IQ1_M),
    ROW(BF16), ROW(TQ1_0), ROW(TQ2_0), ROW(MXFP4),
    ROW(NVFP4), ROW(Q1_0), ROW(Q2_0),
};
#undef ROW

const nx_gguf_type_layout *nx_gguf_type_layout_get(uint32_t type) {
    if (type >= NX_ARRAY_LEN(layouts) || layouts[type].name == NULL) return NULL;
    return &layouts[type];
}

uint64_t nx_gguf_vtype_size(uint32_t t) {
    switch (t) {
    case NX_GGUF_UINT8: case NX_GGUF_INT8: case NX_GGUF_BOOL: return 1;
    case NX_GGUF_UINT16: case NX_GGUF_INT16: return 2;
    case NX_GGUF_UINT32: case NX_GGUF_INT32: case NX_GGUF_FLOAT32: return 4;
    case NX_GGUF_UINT64: case NX_GGUF_INT64: case NX_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

const char *nx_gguf_vtype_name(nx_gguf_vtype t) {
    static const char *names[NX_GGUF_VTYPE_COUNT] = {
        "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32", "bool",
        "string", "array", "uint64", "int64", "float64",
    };
    return (unsigned)t < NX_GGUF_VTYPE_COUNT ? names[t] : "unknown";
}
