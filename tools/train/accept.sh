#!/usr/bin/env bash
# accept.sh NEXTN MODEL PROMPTS DRAFT_MAX [N_PROMPTS [EXTRA_FLAGS...]] - greedy draft acceptance over
# held-out prompts at a fixed draft length (--no-adaptive, one thread, 32 tokens per prompt).
# Deterministic (no timing involved), so the machine's load does not matter.  Prints acceptance
# (accepted / drafted tokens) and mean tokens per verify step over all prompts.
# Example: tools/train/accept.sh build/nextn models/nextn-demo.gguf tests/fixtures/demo-model/prompts.txt 3 50
set -u
nx=$1; m=$2; pf=$3; dm=$4; np=${5:-50}; shift $(($# < 5 ? $# : 5))
head -n "$np" "$pf" | while read -r p; do
  "$nx" spec-bench -m "$m" --prompt "$p" -n 32 --runs 1 --draft-max "$dm" --no-adaptive -t 1 "$@" 2>&1 | grep '^run 1:' |
    sed -E 's/.*acceptance [0-9.]+% \(([0-9]+)\/([0-9]+)\) \| ([0-9.]+) tokens\/step \| [0-9]+ of ([0-9]+) steps.*/\1 \2 \3 \4/'
done | awk -v dm="$dm" '{ acc += $1; dr += $2; tok += $3 * $4; steps += $4; n++ }
   END { printf "draft-max %d: %d prompts, acceptance %.1f%% (%d/%d), %d verify steps, %.2f tokens/step\n",
         dm, n, 100*acc/dr, acc, dr, steps, tok/steps }'
