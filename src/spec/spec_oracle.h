/* spec_oracle.h - a benchmark and test hook of the speculative driver, not part of its interface
 * (spec.h): oracle mode.
 *
 * In oracle mode a sequence's draft tokens are replaced by a known continuation (the MTP passes
 * still run and are timed), so every draft is accepted: `nextn spec-bench --spec-oracle` uses it
 * for the ceiling of the speedup that the measured draft and verify costs allow, tests use it to
 * drive full acceptance.  A generation never needs it.
 */
#ifndef NX_SPEC_ORACLE_H
#define NX_SPEC_ORACLE_H

#include "spec/spec.h"

/* Oracle mode for seq: tokens[i] is the token at position i (prompt and continuation).  The
 * copy is owned by the driver.  Any sampler: with plain decoding's continuation under the same
 * sampler (seed included) every draft is accepted, greedy or sampled. */
bool nx_spec_set_oracle(nx_spec *s, int32_t seq, const int32_t *tokens, int32_t n, nx_err *err);

#endif
