#!/usr/bin/env bash
# demo.sh BUILD_DIR - the default job of `make demo`.
# Until a trained model ships in models/, it writes a small synthetic qwen35 GGUF (seeded random
# weights, so its output text is meaningless) and shows what `nextn info` reports about it.
set -euo pipefail
build=${1:-build}
"$build/nextn" version
model="$build/demo-tiny.gguf"
echo "== nextn mkmodel --preset tiny -o $model"
"$build/nextn" mkmodel --preset tiny -o "$model"
echo "== nextn info $model"
"$build/nextn" info "$model"
