#!/usr/bin/env bash
# test_deps.sh - scripts/deps.sh against stand-ins for dpkg-query (every package missing),
# apt-get (records its arguments), sudo and systemctl: every apt-get call waits for the dpkg lock
# (-o DPkg::Lock::Timeout=600) instead of dying when another apt holds it.
. "$(dirname "$0")/lib.sh"
mkdir "$tmp/bin"
printf '#!/bin/sh\nexit 1\n' >"$tmp/bin/dpkg-query"
printf '#!/bin/sh\necho "$*" >>"%s"\n' "$tmp/apt.log" >"$tmp/bin/apt-get"
printf '#!/bin/sh\nexec "$@"\n' >"$tmp/bin/sudo"
printf '#!/bin/sh\nexit 0\n' >"$tmp/bin/systemctl"
chmod +x "$tmp/bin"/*
check "deps.sh runs apt-get update and install" \
  'PATH="$tmp/bin:$PATH" bash "$NEXTN_SRC/scripts/deps.sh" 2>"$tmp/err" && grep -qw update "$tmp/apt.log" && grep -q " install .*cmake" "$tmp/apt.log"'
check "every apt-get call waits for the dpkg lock" \
  '[ "$(wc -l <"$tmp/apt.log")" -ge 2 ] && ! grep -v -- "-o DPkg::Lock::Timeout=600 " "$tmp/apt.log"'
exit $fail
