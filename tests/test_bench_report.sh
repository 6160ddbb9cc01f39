#!/usr/bin/env bash
# test_bench_report.sh - bench/report.sh (the script behind docs/BENCHMARKS.md) keeps working:
# --quick runs every table's commands on the tiny presets and prints six tables with nextn figures
# and "not measured" peer columns; a stub llama-bench's CSV lands in the llama.cpp columns and the
# ratio; --write replaces only the text between the markers; --dry runs nothing; bad input exits 2.
. "$(dirname "$0")/lib.sh"
build=${NEXTN_BUILD:-build}
report="${NEXTN_SRC:-.}/bench/report.sh"

printf 'head line\n<!-- report.sh begin -->\nold tables\n<!-- report.sh end -->\nfoot line\n' >"$tmp/page.md"
check "--quick runs all six tables without peers and writes them between the markers" \
      '"$report" --quick --build "$build" --models "$tmp/models" --out "$tmp/o1" --port 18791 --write "$tmp/page.md" >"$tmp/q.md" 2>"$tmp/q.err" ||
       { cat "$tmp/q.err"; false; }'
check "six table headings, each with its sitting line (date, commit, CPU, cores, read GB/s)" \
      '[ "$(grep -c "^### " "$tmp/q.md")" = 6 ] &&
       [ "$(grep -cE "^Sitting: 20[0-9-]+ [0-9:]+ UTC, nextn [0-9a-f]+.*\([0-9]+ cores, .*\), .-t 2., load [0-9.]+, streaming read [0-9.]+ GB/s on 2 threads" "$tmp/q.md")" = 6 ]'
check "decode and MoE rows: positive nextn pp/tg, llama.cpp and ik_llama not measured" \
      'awk -F" [|] " "/^[|] tiny(moe)?-/ && NF >= 11 { if (\$3 > 0 && \$7 > 0 && \$4 == \"not measured\" && \$5 == \"not measured\" && \$6 == \"-\") ok++ }
                      END { exit ok == 3 ? 0 : 1 }" "$tmp/q.md"'
check "MTP row: nextn speedup and acceptance, llama.cpp not measured" \
      'grep -qE "^[|] nextn, adaptive [|] [0-9]+ [|] [0-9]+ [|] [0-9.]+x [|] [0-9.]+ % [|]" "$tmp/q.md" &&
       grep -q "^| llama.cpp draft-mtp, fixed 3 | not measured" "$tmp/q.md"'
check "serving rows: nextn plain and MTP tokens/s at 1 and 2 clients, llama-server not measured" \
      'grep -qE "^[|] nextn-plain [|] [0-9.]+ [|] [0-9.]+ [|]$" "$tmp/q.md" && grep -qE "^[|] nextn-mtp [|] [0-9.]+ [|] [0-9.]+ [|]$" "$tmp/q.md" &&
       grep -q "^| llama-plain | not measured | not measured |$" "$tmp/q.md"'
check "quantize and load rows carry nextn seconds" \
      'grep -qE "^[|] tiny-f16 [|] [0-9]+ [|] [0-9.]+ [|] not measured [|]" "$tmp/q.md" &&
       grep -qE "^[|] tiny-f32 [|] [0-9.]+ [|] [0-9.]+ [|] not measured [|] not measured [|]$" "$tmp/q.md"'
check "--write kept the lines outside the markers and replaced the ones inside" \
      '[ "$(head -n 2 "$tmp/page.md" | tail -n 1)" = "<!-- report.sh begin -->" ] && [ "$(head -n 1 "$tmp/page.md")" = "head line" ] &&
       [ "$(tail -n 1 "$tmp/page.md")" = "foot line" ] && ! grep -q "old tables" "$tmp/page.md" &&
       [ "$(grep -c "^### " "$tmp/page.md")" = 6 ]'

# a stub llama-bench: fixed rates in llama-bench's CSV layout (quoted fields, columns by name)
mkdir -p "$tmp/peer"
cat >"$tmp/peer/llama-bench" <<'EOF'
#!/bin/sh
[ "$1" = --version ] && { echo "version: 1 (stub0001)"; exit 0; }
p=0; n=0
while [ $# -gt 0 ]; do case $1 in -p) p=$2; shift ;; -n) n=$2; shift ;; esac; shift; done
echo 'build_commit,n_threads,n_prompt,n_gen,avg_ns,stddev_ns,avg_ts,stddev_ts'
[ "$p" != 0 ] && echo "\"stub0001\",\"2\",\"$p\",\"0\",\"1\",\"0\",\"100.000000\",\"1.0\""
[ "$n" != 0 ] && echo "\"stub0001\",\"2\",\"0\",\"$n\",\"1\",\"0\",\"50.000000\",\"1.0\""
exit 0
EOF
chmod +x "$tmp/peer/llama-bench"
check "a peer's llama-bench CSV fills the llama.cpp columns and the nextn / llama.cpp ratios" \
      '"$report" --quick --build "$build" --models "$tmp/models" --out "$tmp/o2" --areas decode --llama "$tmp/peer" >"$tmp/p.md" 2>"$tmp/p.err" &&
       grep -q "llama.cpp (stub0001)" "$tmp/p.md" &&
       awk -F" [|] " "/^[|] tiny-/ && NF >= 11 { d1 = \$6 - \$3 / 100; d2 = \$10 - \$7 / 50   # the columns are rounded: allow for it
                        if (\$4 == \"100.0\" && \$8 == \"50.0\" && \$6 ~ /x\$/ && d1 * d1 < 1e-4 && d2 * d2 < 1e-4) ok++ }
                      END { exit ok == 2 ? 0 : 1 }" "$tmp/p.md" || { cat "$tmp/p.err" "$tmp/p.md"; false; }'
check "--dry lists the peer commands and runs nothing" \
      '"$report" --dry --build "$tmp/none" --models "$tmp/none" --llama "$tmp/peer" --out "$tmp/o3" >"$tmp/d.txt" 2>&1 &&
       grep -q "llama-bench -m .*08b-q4_k_m.gguf -p 512 -n 128 -r 3 -t 2" "$tmp/d.txt" && grep -q "nextn quantize" "$tmp/d.txt" && [ ! -e "$tmp/none" ]'
check "--write on a file without markers exits 2 naming them" \
      'printf "x\n" >"$tmp/nomark.md"; out=$("$report" --quick --build "$build" --write "$tmp/nomark.md" 2>&1); [ $? -eq 2 ] && echo "$out" | grep -q "report.sh begin"'
check "an unknown area exits 2" 'out=$("$report" --dry --areas "decode gpu" 2>&1); [ $? -eq 2 ] && echo "$out" | grep -q "unknown area .gpu."'
check "-t 0 exits 2" 'out=$("$report" --dry -t 0 2>&1); [ $? -eq 2 ] && echo "$out" | grep -q -- "-t:"'
exit $fail
