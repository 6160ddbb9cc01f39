#!/usr/bin/env bash
# demo.sh BUILD_DIR - the default job of `make demo`.
# Until a trained model ships in models/, it writes a small synthetic GGUF and shows `nextn info`.
set -euo pipefail
build=${1:-build}
"$build/nextn" version
