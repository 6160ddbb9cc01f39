#!/usr/bin/env bash
# spec_accept.sh NEXTN MODEL PROMPTS DRAFT_MAX N_PROMPTS N_GEN "SEEDS" [EXTRA_FLAGS...] - draft
# acceptance and tokens per verify step over the first N_PROMPTS prompts (lines of token ids) at a
# fixed draft length (--no-adaptive, one thread), once per seed.  Counts only, no timing: the
# machine's load does not matter.  EXTRA_FLAGS go to spec-bench (e.g. --temp 0.7, --draft-vocab 0).
# Example (docs/mtp.md "Sampling"):
#   bench/spec_accept.sh build/nextn models/nextn-demo.gguf tests/fixtures/demo-model/prompts.txt 3 16 128 "1 2 3" --temp 0.7
set -u
[ $# -ge 7 ] || { echo "usage: $0 NEXTN MODEL PROMPTS DRAFT_MAX N_PROMPTS N_GEN \"SEEDS\" [FLAGS...]" >&2; exit 2; }
nx=$1; m=$2; pf=$3; dm=$4; np=$5; ng=$6; seeds=$7; shift 7
for seed in $seeds; do
  head -n "$np" "$pf" | while read -r p; do
    "$nx" spec-bench -m "$m" --prompt "$p" -n "$ng" --runs 1 --draft-max "$dm" --no-adaptive -t 1 --seed "$seed" "$@" 2>&1 |
      grep '^run 1:' |
      sed -E 's/.*acceptance [0-9.]+% \(([0-9]+)\/([0-9]+)\) \| ([0-9.]+) tokens\/step \| [0-9]+ of ([0-9]+) steps.*/\1 \2 \3 \4/'
  done
done | awk -v dm="$dm" '{ acc += $1; dr += $2; tok += $3 * $4; steps += $4; n++ }
   END { if (!n || !dr) { print "no runs" > "/dev/stderr"; exit 1 }
         printf "draft-max %d: %d runs, acceptance %.1f%% (%d/%d), %d verify steps, %.3f tokens/step\n",
         dm, n, 100*acc/dr, acc, dr, steps, tok/steps }'
