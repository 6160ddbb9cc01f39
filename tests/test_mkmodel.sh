#!/usr/bin/env bash
# test_mkmodel.sh - `nextn mkmodel`: writes a loadable tiny model, is deterministic, rejects bad options.
set -u
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
check() { if ! eval "$2"; then echo "FAIL: $1"; fail=1; else echo "ok: $1"; fi; }
check "tiny q8_0 writes"        '"$NEXTN" mkmodel --preset tiny --type q8_0 --seed 4 -o "$tmp/a.gguf" 2>/dev/null'
check "same seed, same bytes"   '"$NEXTN" mkmodel --preset tiny --type q8_0 --seed 4 -t 1 -o "$tmp/b.gguf" 2>/dev/null && cmp -s "$tmp/a.gguf" "$tmp/b.gguf"'
check "info reads it as qwen35" '"$NEXTN" info "$tmp/a.gguf" | grep -q "qwen35.ssm.group_count"'
check "--no-mtp drops the block" '"$NEXTN" mkmodel --preset tiny --no-mtp --vocab 300 -o "$tmp/c.gguf" 2>/dev/null && ! "$NEXTN" info "$tmp/c.gguf" | grep -q "nextn_predict\|blk.6"'
check "unknown preset exits 1 naming it" 'out=$("$NEXTN" mkmodel --preset 70b -o "$tmp/x.gguf" 2>&1); [ $? -eq 1 ] && echo "$out" | grep -q "70b"'
check "unknown type exits 2"    'out=$("$NEXTN" mkmodel --preset tiny --type q9_9 -o "$tmp/x.gguf" 2>&1); [ $? -eq 2 ] && echo "$out" | grep -q "q9_9"'
check "missing -o exits 2"      '"$NEXTN" mkmodel --preset tiny >/dev/null 2>&1; [ $? -eq 2 ]'
check "vocab too small exits 1" 'out=$("$NEXTN" mkmodel --preset tiny --vocab 10 -o "$tmp/x.gguf" 2>&1); [ $? -eq 1 ] && echo "$out" | grep -q "vocab"'
check "no partial file on error" '[ ! -e "$tmp/x.gguf" ]'
exit $fail
