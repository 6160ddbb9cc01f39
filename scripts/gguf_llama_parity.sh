#!/usr/bin/env bash
# gguf_llama_parity.sh NEXTN LLAMA_GGUF FILE.gguf... - compares what `nextn info` reports for each
# file with llama.cpp's own reader (its `llama-gguf FILE r n` example program, built separately;
# this script does not build llama.cpp).  Compared: version, alignment, data offset, the key list
# in order, and every tensor's name, byte size and absolute offset.  Exit status 1 on any mismatch
# or if either reader rejects a file.
set -uo pipefail
nextn=$1; llama=$2; shift 2
status=0
for f in "$@"; do
  ours=$("$nextn" info "$f") || { echo "FAIL $f: nextn info rejected it"; status=1; continue; }
  theirs=$("$llama" "$f" r n 2>&1) || { echo "FAIL $f: llama-gguf rejected it"; echo "$theirs" | tail -3; status=1; continue; }
  theirs=$(grep '^gguf_ex_read_0: ' <<<"$theirs" | sed 's/^gguf_ex_read_0: //')
  l_ver=$(awk '/^version:/ {print $2}' <<<"$theirs")
  l_align=$(awk '/^alignment:/ {print $2}' <<<"$theirs")
  l_doff=$(awk '/^data offset:/ {print $3}' <<<"$theirs")
  l_keys=$(sed -n 's/^kv\[[0-9]*\]: key = //p' <<<"$theirs")
  l_tens=$(sed -n 's/^tensor\[[0-9]*\]: name = \(.*\), size = \([0-9]*\), offset = \([0-9]*\)$/\1 \2 \3/p' <<<"$theirs" |
           awk -v d="$l_doff" '{print $1, $2, $3 + d}')
  fmt=$(grep '^format:' <<<"$ours")
  o_ver=$(sed 's/.*GGUF v\([0-9]*\),.*/\1/' <<<"$fmt")
  o_align=$(sed 's/.*alignment \([0-9]*\),.*/\1/' <<<"$fmt")
  o_doff=$(printf '%d' "$(sed 's/.*data section at \(0x[0-9a-f]*\).*/\1/' <<<"$fmt")")
  o_keys=$(awk '/^metadata:/ {m=1; next} /^$/ {m=0} m {print $1}' <<<"$ours")
  o_tens=$(awk '/^tensors:/ {t=1; getline; next} /^$/ {t=0} t {print $2, $(NF-1), $NF}' <<<"$ours" |
           while read -r name bytes off; do echo "$name $bytes $((off))"; done)
  bad=""
  [ "$o_ver" = "$l_ver" ] || bad+=" version($o_ver vs $l_ver)"
  [ "$o_align" = "$l_align" ] || bad+=" alignment($o_align vs $l_align)"
  [ "$o_doff" = "$l_doff" ] || bad+=" data-offset($o_doff vs $l_doff)"
  [ "$o_keys" = "$l_keys" ] || bad+=" keys"
  [ "$o_tens" = "$l_tens" ] || bad+=" tensors"
  if [ -n "$bad" ]; then
    echo "FAIL $f:$bad"; status=1
    diff <(echo "$o_keys"; echo "$o_tens") <(echo "$l_keys"; echo "$l_tens") | head -10
  else
    echo "ok   $f: v$o_ver, alignment $o_align, data at $o_doff, $(grep -c . <<<"$o_keys") keys, $(grep -c . <<<"$o_tens") tensors agree"
  fi
done
exit $status
