/* convert_kernels.c - scalar converter kernels and the run-time choice of the SIMD ones. */
#include "convert/convert_kernels.h"

#include <math.h>
#include <string.h>

#include "nextn_internal.h"

void nx_cv_f16_to_f32_scalar(const void *src, float *dst, uint64_t n) {
    const uint8_t *s = src;
    for (uint64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, s + 2 * i, 2);
        dst[i] = nx_f16_to_f32(h);
    }
}

void nx_cv_q8_0_scalar(const float *src, void *dst, uint64_t n) {
    uint8_t *out = dst;
    for (uint64_t b = 0; b < n / 32; b++, src += 32, out += 34) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(src[j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        uint16_t dh = nx_f32_to_f16(d);
        memcpy(out, &dh, 2);
        for (int j = 0; j < 32; j++) out[2 + j] = (uint8_t)(int8_t)roundf(src[j] * id);
    }
}

nx_cv_f16_to_f32_fn nx_cv_f16_to_f32_best(void) {
    return nx_cpu_isa() >= NX_ISA_AVX2 ? nx_cv_f16_to_f32_avx2 : nx_cv_f16_to_f32_scalar;
}

nx_cv_q8_0_fn nx_cv_q8_0_best(void) {
    return nx_cpu_isa() >= NX_ISA_AVX2 ? nx_cv_q8_0_avx2 : nx_cv_q8_0_scalar;
}
