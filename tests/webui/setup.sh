#!/usr/bin/env bash
# setup.sh - installs playwright-core (pinned in package.json / package-lock.json) into
# tests/webui/node_modules (git-ignored) unless it is there.  Fails loudly when node/npm are
# missing or the install fails: the browser test must not be skipped.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
for tool in node npm; do
  command -v "$tool" >/dev/null || { echo "webui setup: '$tool' not found (scripts/deps.sh installs nodejs and npm)" >&2; exit 1; }
done
exec 9>"$here/.install.lock"
flock 9
pkg="$here/node_modules/playwright-core/package.json"
if ! [ -f "$pkg" ] || ! grep -q '"version": "1.64.1"' "$pkg"; then
  echo "webui setup: npm ci in $here" >&2
  (cd "$here" && npm ci --no-audit --no-fund --loglevel=error) >&2 || {
    echo "webui setup: npm install of playwright-core failed (is the npm registry reachable?)" >&2; exit 1; }
fi
