/* gguf_types.h - the storage layout of every ggml tensor type id a GGUF file may carry: one list,
 * the only place these facts are written.  gguf_types.c builds the reader's table from it (every
 * id, also the formats nextn cannot compute with) and quant.c takes the name, elements per block
 * and bytes per block of each format it computes with from it (NX_GGUF_NAME / _BLOCK / _BYTES,
 * checked against its block structs at compile time).
 *
 * Facts from ggml's block definitions (ggml-common.h static_asserts); ids 4, 5, 31-33 and 36-38
 * were removed from ggml and are rejected.
 */
#ifndef NX_GGUF_TYPES_H
#define NX_GGUF_TYPES_H

/* NX_GGUF_LAYOUT_<ggml name in capitals>: id, name, elements per block, bytes per block */
#define NX_GGUF_LAYOUT_F32       0, "f32",        1,   4
#define NX_GGUF_LAYOUT_F16       1, "f16",        1,   2
#define NX_GGUF_LAYOUT_Q4_0      2, "q4_0",      32,  18
#define NX_GGUF_LAYOUT_Q4_1      3, "q4_1",      32,  20
#define NX_GGUF_LAYOUT_Q5_0      6, "q5_0",      32,  22
#define NX_GGUF_LAYOUT_Q5_1      7, "q5_1",      32,  24
#define NX_GGUF_LAYOUT_Q8_0      8, "q8_0",      32,  34
#define NX_GGUF_LAYOUT_Q8_1      9, "q8_1",      32,  36
#define NX_GGUF_LAYOUT_Q2_K     10, "q2_K",     256,  84
#define NX_GGUF_LAYOUT_Q3_K     11, "q3_K",     256, 110
#define NX_GGUF_LAYOUT_Q4_K     12, "q4_K",     256, 144
#define NX_GGUF_LAYOUT_Q5_K     13, "q5_K",     256, 176
#define NX_GGUF_LAYOUT_Q6_K     14, "q6_K",     256, 210
#define NX_GGUF_LAYOUT_Q8_K     15, "q8_K",     256, 292
#define NX_GGUF_LAYOUT_IQ2_XXS  16, "iq2_xxs",  256,  66
#define NX_GGUF_LAYOUT_IQ2_XS   17, "iq2_xs",   256,  74
#define NX_GGUF_LAYOUT_IQ3_XXS  18, "iq3_xxs",  256,  98
#define NX_GGUF_LAYOUT_IQ1_S    19, "iq1_s",    256,  50
#define NX_GGUF_LAYOUT_IQ4_NL   20, "iq4_nl",    32,  18
#define NX_GGUF_LAYOUT_IQ3_S    21, "iq3_s",    256, 110
#define NX_GGUF_LAYOUT_IQ2_S    22, "iq2_s",    256,  82
#define NX_GGUF_LAYOUT_IQ4_XS   23, "iq4_xs",   256, 136
#define NX_GGUF_LAYOUT_I8       24, "i8",         1,   1
#define NX_GGUF_LAYOUT_I16      25, "i16",        1,   2
#define NX_GGUF_LAYOUT_I32      26, "i32",        1,   4
#define NX_GGUF_LAYOUT_I64      27, "i64",        1,   8
#define NX_GGUF_LAYOUT_F64      28, "f64",        1,   8
#define NX_GGUF_LAYOUT_IQ1_M    29, "iq1_m",    256,  56
#define NX_GGUF_LAYOUT_BF16     30, "bf16",       1,   2
#define NX_GGUF_LAYOUT_TQ1_0    34, "tq1_0",    256,  54
#define NX_GGUF_LAYOUT_TQ2_0    35, "tq2_0",    256,  66
#define NX_GGUF_LAYOUT_MXFP4    39, "mxfp4",     32,  17
#define NX_GGUF_LAYOUT_NVFP4    40, "nvfp4",     64,  36
#define NX_GGUF_LAYOUT_Q1_0     41, "q1_0",     128,  18
#define NX_GGUF_LAYOUT_Q2_0     42, "q2_0",      64,  18

#define NX_GGUF_ID(T) NX_GGUF_ARG1_(NX_GGUF_LAYOUT_##T)
#define NX_GGUF_NAME(T) NX_GGUF_ARG2_(NX_GGUF_LAYOUT_##T)
#define NX_GGUF_BLOCK(T) NX_GGUF_ARG3_(NX_GGUF_LAYOUT_##T)
#define NX_GGUF_BYTES(T) NX_GGUF_ARG4_(NX_GGUF_LAYOUT_##T)
#define NX_GGUF_ARG1_(...) NX_GGUF_ARG1__(__VA_ARGS__)
#define NX_GGUF_ARG2_(...) NX_GGUF_ARG2__(__VA_ARGS__)
#define NX_GGUF_ARG3_(...) NX_GGUF_ARG3__(__VA_ARGS__)
#define NX_GGUF_ARG4_(...) NX_GGUF_ARG4__(__VA_ARGS__)
#define NX_GGUF_ARG1__(id, name, block, bytes) id
#define NX_GGUF_ARG2__(id, name, block, bytes) name
#define NX_GGUF_ARG3__(id, name, block, bytes) block
#define NX_GGUF_ARG4__(id, name, block, bytes) bytes

#endif
