#!/usr/bin/env bash
# demo.sh BUILD_DIR - the default job of `make demo`.
# Runs the shipped demo model (models/nextn-demo.gguf: a 5.3 M-parameter Qwen3.5-architecture model
# with an MTP head, trained by tools/train/ on Debian text, see models/README.md):
#   1. `nextn run`: greedy text from a held-out prompt (Genesis 20 is not in the training set);
#   2. `nextn spec-bench`: the same prompt decoded plain and with MTP speculative decoding in one
#      run; prints both speeds, the speedup, the draft acceptance and tokens per step, and checks
#      that both outputs are identical.  The draft head scores only the 1024 most frequent tokens:
#      models/nextn-demo.draft-vocab.txt sits beside the model, so it is used automatically
#      (docs/mtp.md "Default"; --draft-vocab 0 would score all 4096).
# Without the model file it falls back to a synthetic random-weight model and `nextn info`.
set -euo pipefail
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
model="$root/models/nextn-demo.gguf"
"$build/nextn" version
if [ ! -f "$model" ]; then
    model="$build/demo-tiny.gguf"
    echo "== models/nextn-demo.gguf not found: nextn mkmodel --preset tiny -o $model"
    "$build/nextn" mkmodel --preset tiny -o "$model"
    echo "== nextn info $model"
    "$build/nextn" info "$model"
    exit 0
fi
prompt=$'Genesis 20\n  1 And Abraham journeyed from thence toward the south country,'
echo "== nextn run -m models/nextn-demo.gguf -p 'Genesis 20 ...' -n 96 --temp 0"
"$build/nextn" run -m "$model" -p "$prompt" -n 96 --temp 0
echo
ids=$("$build/nextn" tokenize -m "$model" --ids "$prompt" | tr -s ' \n' ',,' | sed 's/,$//')
echo "== nextn spec-bench: plain vs MTP speculative decoding (greedy, 128 tokens, draft-max 3)"
"$build/nextn" spec-bench -m "$model" --prompt "$ids" -n 128 --draft-max 3 --runs 5
