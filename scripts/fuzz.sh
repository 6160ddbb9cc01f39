#!/usr/bin/env bash
# fuzz.sh BUILD_DIR SECONDS - runs every fuzz target for SECONDS each, from its seed corpus.
# Findings (crash-*, leak-*, timeout-*) are written to build-fuzz/findings/ and fail the run.
set -euo pipefail
build=$1; secs=$2
shopt -s nullglob
status=0
for bin in "$build"/fuzz_*; do
  [ -x "$bin" ] || continue
  name=$(basename "$bin")
  seeds=fuzz/corpus/${name#fuzz_}
  work="$build/corpus-work/$name"; mkdir -p "$work" "$build/findings"
  echo "fuzz: $name for ${secs}s (seeds: $seeds)"
  if ! "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
       -artifact_prefix="$build/findings/" "$work" ${seeds:+$( [ -d "$seeds" ] && echo "$seeds")} 2>"$build/$name.log"; then
    echo "fuzz: $name FOUND A PROBLEM (log: $build/$name.log)"; tail -30 "$build/$name.log"; status=1
  else
    grep -E "stat::number_of_executed_runs|Done" "$build/$name.log" | tail -2 || true
  fi
done
exit $status
