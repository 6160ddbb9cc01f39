/* testutil.c - see testutil.h */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

void tu_rng_seed(tu_rng *r, uint64_t seed) {
    uint64_t z = seed + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    r->s = (z ^ (z >> 31)) | 1;
}

uint64_t tu_rng_u64(tu_rng *r) {
    uint64_t x = r->s;
    x ^= x << 13; x ^= x >> 7; x ^= x << 17;
    return r->s = x;
}

float tu_rng_uniform(tu_rng *r) { return (float)(tu_rng_u64(r) >> 40) / (float)(1u << 24); }

float tu_rng_normal(tu_rng *r) {
    float u1 = tu_rng_uniform(r), u2 = tu_rng_uniform(r);
    if (u1 < 1e-7f) u1 = 1e-7f;
    return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853f * u2);
}

const char *tu_tmp_path(const char *tag) {
    static char buf[8][512];
    static int n;
    const char *dir = getenv("TMPDIR");
    if (!dir || !*dir) dir = "/tmp";
    char *b = buf[n % 8];
    snprintf(b, sizeof buf[0], "%s/nextn-test-%d-%d-%s", dir, (int)getpid(), n, tag);
    n++;
    return b;
}

void *tu_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (n < 0) { fclose(f); return NULL; }
    char *p = malloc((size_t)n + 1);
    if (p && n > 0 && fread(p, 1, (size_t)n, f) != (size_t)n) { free(p); p = NULL; }
    if (p) p[n] = 0; /* a NUL after the data, so text files can be used as C strings */
    fclose(f);
    if (p && len) *len = (size_t)n;
    return p;
}

const char *tu_src_path(const char *rel) {
    static char buf[1024];
    const char *root = getenv("NEXTN_SRC");
    snprintf(buf, sizeof buf, "%s/%s", root && *root ? root : ".", rel);
    return buf;
}
