#!/usr/bin/env bash
# test_cli.sh - the nextn binary dispatches commands and rejects unknown ones.
set -u
fail=0
check() { if ! eval "$2"; then echo "FAIL: $1"; fail=1; else echo "ok: $1"; fi; }
check "version prints"        '"$NEXTN" version | grep -q "^nextn "'
check "help exits 0"          '"$NEXTN" --help >/dev/null'
check "no args exits 2"       '"$NEXTN" >/dev/null 2>&1; [ $? -eq 2 ]'
check "unknown command exits 2 and names it" \
      'out=$("$NEXTN" frobnicate 2>&1); [ $? -eq 2 ] && echo "$out" | grep -q "frobnicate"'
exit $fail
