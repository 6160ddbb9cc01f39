/* testutil.h - helpers shared by the cmocka tests (seeded RNG, temp paths, file reading). */
#ifndef NX_TESTUTIL_H
#define NX_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

/* splitmix64-seeded xorshift RNG: deterministic across platforms. */
typedef struct { uint64_t s; } tu_rng;
void     tu_rng_seed(tu_rng *r, uint64_t seed);
uint64_t tu_rng_u64(tu_rng *r);
float    tu_rng_uniform(tu_rng *r);            /* [0, 1) */
float    tu_rng_normal(tu_rng *r);             /* N(0, 1) */

/* A fresh path under $TMPDIR (or /tmp) unique to this process: "<dir>/nextn-test-<pid>-<n>-<tag>". */
const char *tu_tmp_path(const char *tag);
/* Reads a whole file; returns NULL on failure.  *len receives the size; a NUL byte follows the
 * data (not counted).  free() the result. */
void *tu_read_file(const char *path, size_t *len);
/* Path of a file under the source tree ($NEXTN_SRC or ".").  Static buffer. */
const char *tu_src_path(const char *rel);

#endif
