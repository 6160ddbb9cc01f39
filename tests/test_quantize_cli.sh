#!/usr/bin/env bash
# test_quantize_cli.sh - `nextn quantize` from the command line: output, --force, usage errors.
set -u
fail=0
check() { if ! eval "$2"; then echo "FAIL: $1"; fail=1; else echo "ok: $1"; fi; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/nextn-quantize-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
"$NEXTN" convert "$NEXTN_SRC/tests/fixtures/hf-qwen35-a" -o "$tmp/a.gguf" -q || { echo "FAIL: convert"; exit 1; }
check "quantizes with progress"     '"$NEXTN" quantize "$tmp/a.gguf" "$tmp/q.gguf" q4_k_m -t 2 2>"$tmp/log" && grep -q "MB/s" "$tmp/log" && "$NEXTN" info "$tmp/q.gguf" | grep -q q5_0'
check "refuses to overwrite"        'out=$("$NEXTN" quantize "$tmp/a.gguf" "$tmp/q.gguf" q8_0 -q 2>&1); [ $? -eq 1 ] && echo "$out" | grep -q "use --force"'
check "--force replaces"            '"$NEXTN" quantize "$tmp/a.gguf" "$tmp/q.gguf" Q8_0 --force -q'
check "unknown type is a usage error" 'out=$("$NEXTN" quantize "$tmp/a.gguf" "$tmp/x.gguf" q3_k_s 2>&1); [ $? -eq 2 ] && echo "$out" | grep -q "q3_k_s"'
check "missing input is an error"   'out=$("$NEXTN" quantize "$tmp/none.gguf" "$tmp/x.gguf" q8_0 2>&1); [ $? -eq 1 ] && echo "$out" | grep -q "none.gguf"'
check "bad -t is a usage error"     '"$NEXTN" quantize "$tmp/a.gguf" "$tmp/x.gguf" q8_0 -t 0 2>/dev/null; [ $? -eq 2 ]'
exit $fail
