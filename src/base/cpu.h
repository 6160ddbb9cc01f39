/* cpu.h - the instruction-set level the SIMD kernels use, chosen once per process.
 *
 * The level is the best this CPU supports (CPUID), lowered by the NX_ISA environment variable
 * (scalar|avx2|avx512) when that names a lower level; it is fixed at the first nx_cpu_isa()
 * call and read-only after: nothing sets it, so every context, kernel table (quant.c,
 * convert_kernels.c), matmul and layer of the process agrees on it.  Tests and benchmarks that
 * compare levels in one process pass the level explicitly: nx_matmul_isa (capped at this one),
 * nx_dot_plan_for, nx_vec_dot_for.
 */
#ifndef NX_CPU_H
#define NX_CPU_H

#include <stdbool.h>

/* Instruction-set levels; the one in use is fixed at the first nx_cpu_isa() call. */
typedef enum nx_isa { NX_ISA_SCALAR = 0, NX_ISA_AVX2 = 1, NX_ISA_AVX512 = 2, NX_ISA_COUNT } nx_isa;

/* The level the kernels use: the best this CPU supports, lowered by the NX_ISA environment
 * variable (scalar|avx2|avx512) if set when this is first called; read once per process. */
nx_isa nx_cpu_isa(void);
const char *nx_isa_name(nx_isa isa);
bool nx_isa_from_name(const char *name, nx_isa *out); /* case-insensitive; false if unknown */

#endif
