#!/usr/bin/env bash
# demo.sh BUILD_DIR - the default job of `make demo`.
# Until a trained model ships in models/, it writes a small synthetic GGUF and shows `nextn info`.
set -euo pipefail
build=${1:-build}
"$build/nextn" version
sample="$build/demo-sample.gguf"
echo "== nextn gguf-sample $sample  (a synthetic GGUF: every metadata type, f32/f16/q8_0/q4_K tensors)"
"$build/nextn" gguf-sample "$sample"
echo "== nextn info $sample"
"$build/nextn" info "$sample"
