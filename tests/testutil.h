/* testutil.h - helpers shared by the cmocka tests (seeded RNG, temp paths, file reading, the
 * in-memory `tiny` / `tiny-moe` model fixture of the forward-pass tests). */
#ifndef NX_TESTUTIL_H
#define NX_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "nextn.h"
#include "convert/mkmodel.h"
#include "forward/forward.h"

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

/* Token ids (separated by commas, blanks or newlines) of the source-tree file rel, at most cap;
 * fails the test if it cannot be read. */
int tu_read_tokens(const char *rel, int32_t *tok, int cap);

/* ---- outputs recorded as size and FNV-1a 64 (the quantizer fixtures) ----------------------- */
uint64_t tu_fnv1a64_file(const char *path, size_t *len);
/* The line "KEY1 KEY2 SIZE HASH" (or "KEY1 KEY2 refused") of the source-tree manifest file:
 * false for "refused", fails the test when there is no such line. */
bool tu_recorded(const char *manifest, const char *key1, const char *key2, unsigned long long *size,
                 unsigned long long *hash);
/* Fails the test unless the file at path has the recorded size and hash (key1 "input": an input
 * the test made, reported as a changed generator). */
void tu_expect_recorded(const char *manifest, const char *key1, const char *key2, const char *path);

/* ---- the trained demo model (models/nextn-demo.gguf) and its held-out prompts ----------- */
/* Loads the demo model (with its MTP head if mtp); NULL after printing the error to stderr, so a
 * cmocka setup can return -1. */
nextn_model *tu_demo_model(bool mtp);
/* The token ids of the first n_lines prompts of tests/fixtures/demo-model/prompts.txt, one after
 * the other, at most cap of them; fails the test if the file cannot be read. */
int32_t tu_demo_prompt(int32_t *out, int32_t cap, int n_lines);

/* ---- an mkmodel preset (`tiny`, `tiny-moe`) in memory (F32 weights) with a 2-thread pool --- */
typedef struct tu_tiny {
    nx_mk_memory mem;
    nx_model model;
    nx_pool *pool;
} tu_tiny;

/* Builds and binds `preset` from `seed`; mtp: with the MTP block; tie: -1 preset's, 0 untied,
 * 1 tied.  Fails the test on error. */
tu_tiny *tu_tiny_new(const char *preset, uint64_t seed, bool mtp, int tie);
/* cmocka teardown: frees the tu_tiny in *state. */
int tu_tiny_teardown(void **state);
/* A context on it: n_ctx positions, n_seq sequences, n_snap snapshot slots, KV type. */
nx_ctx *tu_tiny_ctx(tu_tiny *t, int n_ctx, int n_seq, int n_snap, nx_kv_type kv);
/* Decodes tokens[0..n) (n <= 256) of seq as one batch after its n_past, logits for every row. */
void tu_decode(nx_ctx *c, int seq, const int32_t *tokens, int n);
double tu_max_abs_diff(const float *a, const float *b, size_t n);
/* Largest difference between the current recurrent state (conv window and delta state, every
 * layer) of sequence sa of a and sequence sb of b. */
double tu_state_diff(const nx_ctx *a, int sa, const nx_ctx *b, int sb);

#endif
