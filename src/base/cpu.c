/* cpu.c - the run-time instruction-set level (see cpu.h). */
#include "base/cpu.h"

#include <pthread.h>
#include <stdlib.h>
#include <strings.h>

#ifdef __x86_64__
#include <cpuid.h>

/* F16C and BMI2 straight from CPUID: clang 14's __builtin_cpu_supports() does not know them. */
static bool cpu_has_f16c_bmi2(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 29))) return false;     /* CPUID.1:ECX.F16C */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(b & (1u << 8))) return false; /* CPUID.7.0:EBX.BMI2 */
    return true;
}
#endif

static nx_isa detect_isa(void) {
#ifdef __x86_64__
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vnni") &&
        __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c_bmi2())
        return NX_ISA_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c_bmi2())
        return NX_ISA_AVX2;
#endif
    return NX_ISA_SCALAR;
}

/* The level is fixed once per process, at the first call: CPUID (slow, a hypervisor trap on
 * VMs), lowered by the NX_ISA environment variable when it names a lower level (A/B benchmarks;
 * other values are ignored).  Nothing changes it afterwards: there is no setter (code that
 * compares levels passes one explicitly, e.g. nx_matmul_isa, and is capped at this one). */
static pthread_once_t isa_once = PTHREAD_ONCE_INIT;
static nx_isa isa_level = NX_ISA_SCALAR; /* written once, inside pthread_once */

static void init_isa(void) {
    nx_isa isa = detect_isa(), env;
    const char *s = getenv("NX_ISA");
    if (s && nx_isa_from_name(s, &env) && env < isa) isa = env;
    isa_level = isa;
}

nx_isa nx_cpu_isa(void) {
    pthread_once(&isa_once, init_isa);
    return isa_level;
}

bool nx_isa_from_name(const char *name, nx_isa *out) {
    for (int i = 0; i < NX_ISA_COUNT; i++)
        if (strcasecmp(name, nx_isa_name((nx_isa)i)) == 0) {
            *out = (nx_isa)i;
            return true;
        }
    return false;
}

const char *nx_isa_name(nx_isa isa) {
    switch (isa) {
    case NX_ISA_SCALAR: return "scalar";
    case NX_ISA_AVX2: return "avx2";
    case NX_ISA_AVX512: return "avx512";
    default: return "unknown";
    }
}
