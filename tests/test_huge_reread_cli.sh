#!/usr/bin/env bash
# test_huge_reread_cli.sh - --no-huge-reread (nextn_model_params.no_huge_reread) on the commands that
# load a model to decode, and the "weights: N % in 2 MiB pages" line of bench, run and spec-bench:
# with the flag a model file cached in small folios stays so ("(re-read off)"); without it the
# load re-reads it into 2 MiB pages where the kernel can (model_load.c, nx_map_prefer_huge).
. "$(dirname "$0")/lib.sh"
model="$tmp/tiny.gguf"
tiny_model "$model"
line='weights: [0-9]+ % in 2 MiB pages'

for c in run chat serve bench spec-bench perplexity eval; do
    check "$c --help lists --no-huge-reread" '"$NEXTN" $c --help 2>&1 | grep -q -- "--no-huge-reread"'
done
check "bench accepts the flag and says the re-read is off" \
      '"$NEXTN" bench -m "$model" -p 4 -n 2 -r 1 --no-huge-reread >"$tmp/o" 2>"$tmp/e" &&
       grep -Eq "^$line \(re-read off\)$" "$tmp/o" && grep -q "^tg2 " "$tmp/o"'
check "bench prints the line without the flag (not 'off')" \
      '"$NEXTN" bench -m "$model" -p 4 -n 2 -r 1 >"$tmp/o" 2>"$tmp/e" &&
       grep -Eq "^$line( \(re-read at load to get them\))?$" "$tmp/o"'
check "run prints the line on stderr, stdout keeps only the ids" \
      '"$NEXTN" run -m "$model" --tokens 1,2,3 -n 2 --temp 0 --print-ids --no-huge-reread >"$tmp/o" 2>"$tmp/e" &&
       grep -Eq "^nextn run: $line \(re-read off\)$" "$tmp/e" && ! grep -q "weights:" "$tmp/o"'
check "spec-bench accepts the flag and prints the line" \
      '"$NEXTN" spec-bench -m "$model" --no-mtp -p 4 -n 2 -r 1 --no-huge-reread >"$tmp/o" 2>"$tmp/e" &&
       grep -Eq "^$line \(re-read off\)$" "$tmp/o"'
check "perplexity and eval accept the flag" \
      '"$NEXTN" perplexity -m "$model" --tokens 1,2,3,4,5,6,7,8 -c 4 --no-huge-reread >/dev/null 2>&1 &&
       "$NEXTN" eval -m "$model" --tokens 1,2,3 -o "$tmp/l.f32" --no-huge-reread >/dev/null 2>&1'

# A file above the 64 MiB threshold, written in 1 MiB pieces (its page cache in folios of at
# most 1 MiB: no 2 MiB entries until it is re-read).  The flag must leave it so; the default
# load then re-reads it, where this kernel maps files with 2 MiB entries at all.
big="$tmp/big.gguf"
"$NEXTN" mkmodel --preset 0.8b --no-mtp --layers 4 --type q8_0 -o "$tmp/big-src.gguf" >/dev/null 2>&1 &&
    dd if="$tmp/big-src.gguf" of="$big" bs=1M conv=fsync status=none && rm -f "$tmp/big-src.gguf" || {
    echo "FAIL: writing the 89 MiB model"; exit 1; }
check "bench --no-huge-reread on a 4 KiB-cached file: re-read off, no re-read" \
      '"$NEXTN" bench -m "$big" -p 1 -n 1 -r 1 --no-huge-reread >"$tmp/off" 2>&1 &&
       grep -Eq "^$line \(re-read off\)$" "$tmp/off"'
"$NEXTN" bench -m "$big" -p 1 -n 1 -r 1 >"$tmp/on" 2>&1 || { echo "FAIL: bench on the big file"; fail=1; }
off=$(sed -En "s/^weights: ([0-9]+) % .*/\1/p" "$tmp/off")
on=$(sed -En "s/^weights: ([0-9]+) % .*/\1/p" "$tmp/on")
echo "big file: $off % in 2 MiB pages with --no-huge-reread, then $on % by default: $(grep '^weights:' "$tmp/on")"
if grep -q "^weights: .*(re-read at load to get them)$" "$tmp/on"; then
    check "the flag kept the cache in small pages, the default load re-read it" '[ "$off" -lt 50 ] && [ "$on" -ge 50 ]'
else
    echo "skip: the default load did not re-read ($on % in 2 MiB pages: this kernel or file system keeps 4 KiB" \
         "entries, or the written file came back 2 MiB-mapped): only the flag's line was checked"
fi
exit $fail
