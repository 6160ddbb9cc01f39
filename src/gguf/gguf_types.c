/* gguf_types.c - storage layout of every ggml tensor type id a GGUF file may carry, and the
 * size of the metadata value types.
 *
 * The reader needs only (elements per block, bytes per block) to size and bound a tensor, and
 * it must know them for every id llama.cpp can write, including formats nextn cannot compute
 * with (IQ*, TQ*, MXFP4, ...), so that `nextn info` works on any llama.cpp file.  The compute
 * table in quant.c describes the formats nextn implements; tests/test_gguf.c checks that both
 * tables agree wherever both describe an id.
 *
 * Facts from ggml's block definitions (ggml-common.h static_asserts); ids 4, 5, 31-33 and 36-38
 * were removed from ggml and are rejected.
 */
#include "gguf/gguf.h"

static const nx_gguf_type_layout layouts[] = {
    [0]  = {"f32", 1, 4},         [1]  = {"f16", 1, 2},
    [2]  = {"q4_0", 32, 18},      [3]  = {"q4_1", 32, 20},
    [6]  = {"q5_0", 32, 22},      [7]  = {"q5_1", 32, 24},
    [8]  = {"q8_0", 32, 34},      [9]  = {"q8_1", 32, 36},
    [10] = {"q2_K", 256, 84},     [11] = {"q3_K", 256, 110},
    [12] = {"q4_K", 256, 144},    [13] = {"q5_K", 256, 176},
    [14] = {"q6_K", 256, 210},    [15] = {"q8_K", 256, 292},
    [16] = {"iq2_xxs", 256, 66},  [17] = {"iq2_xs", 256, 74},
    [18] = {"iq3_xxs", 256, 98},  [19] = {"iq1_s", 256, 50},
    [20] = {"iq4_nl", 32, 18},    [21] = {"iq3_s", 256, 110},
    [22] = {"iq2_s", 256, 82},    [23] = {"iq4_xs", 256, 136},
    [24] = {"i8", 1, 1},          [25] = {"i16", 1, 2},
    [26] = {"i32", 1, 4},         [27] = {"i64", 1, 8},
    [28] = {"f64", 1, 8},         [29] = {"iq1_m", 256, 56},
    [30] = {"bf16", 1, 2},
    [34] = {"tq1_0", 256, 54},    [35] = {"tq2_0", 256, 66},
    [39] = {"mxfp4", 32, 17},     [40] = {"nvfp4", 64, 36},
    [41] = {"q1_0", 128, 18},     [42] = {"q2_0", 64, 18},
};

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
