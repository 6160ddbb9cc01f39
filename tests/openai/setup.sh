#!/usr/bin/env bash
# setup.sh - installs the official OpenAI Node client (openai, pinned in package.json and
# package-lock.json) into tests/openai/node_modules (gitignored) unless it is already there.
# Fails loudly (exit 1) when node or npm is missing or the install fails: the client tests must
# not be skipped.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
for tool in node npm; do
  command -v "$tool" >/dev/null || { echo "openai setup: '$tool' not found; install it (scripts/deps.sh installs nodejs and npm)" >&2; exit 1; }
done
# one installer at a time (make test and make asan may run together)
exec 9>"$here/.install.lock"
flock 9
want=$(node -e 'console.log(require(process.argv[1]).dependencies.openai)' "$here/package.json")
pkg="$here/node_modules/openai/package.json"
if ! [ -f "$pkg" ] || [ "$(node -e 'console.log(require(process.argv[1]).version)' "$pkg")" != "$want" ]; then
  echo "openai setup: npm ci in $here" >&2
  (cd "$here" && npm ci --no-audit --no-fund --loglevel=error) >&2 || {
    echo "openai setup: npm install of openai@$want failed (is the npm registry reachable?)" >&2; exit 1; }
fi
