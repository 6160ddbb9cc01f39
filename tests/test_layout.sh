#!/usr/bin/env bash
# The library boundary (docs/DESIGN.md "Layout and boundaries"), checked on the source tree:
#  - include/nextn.h includes no internal header;
#  - engine components (src/{base,gguf,quant,model,forward,spec,sample,tokenizer,api}/) include
#    neither the tools built on them (src/server/, src/convert/) nor src/nextn_internal.h;
#  - code on top of the engine (cli/, src/server/, src/convert/) reaches the engine only through
#    "nextn.h" or "nextn_internal.h"; besides those it includes its own folder's headers (and the
#    CLI the tools' headers);
#  - every source file under src/ sits in a component folder, and each folder has its section in
#    docs/DESIGN.md.
set -uo pipefail
cd "${NEXTN_SRC:-$(dirname "$0")/..}"
fail=0
bad() { echo "layout: $*" >&2; fail=1; }

engine="base gguf quant model forward spec sample tokenizer api"
tools="server convert"

incs() { grep -Hn '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$@" 2>/dev/null | sed -E 's/^([^:]+):([0-9]+):.*"([^"]+)".*/\1 \2 \3/'; }

# 1. public header
incs include/nextn.h | while read -r f n h; do bad "$f:$n includes \"$h\" (the public header must stand alone)"; done
[ -n "$(incs include/nextn.h)" ] && fail=1

# 2. engine components
for d in $engine; do
  [ -d "src/$d" ] || { bad "src/$d/ is missing"; continue; }
  while read -r f n h; do
    case "$h" in
      server/*|convert/*|nextn_internal.h) bad "$f:$n: engine code includes \"$h\" (a tool built on the engine)";;
    esac
  done < <(incs src/$d/*.[ch])
done

# 3. code on top of the engine
check_top() {  # folder, allowed-prefix regex
  local dir=$1 allow=$2
  while read -r f n h; do
    [[ "$h" == nextn.h || "$h" == nextn_internal.h ]] && continue
    [[ "$h" =~ $allow ]] && continue
    bad "$f:$n includes \"$h\": outside the engine use \"nextn.h\" or \"nextn_internal.h\""
  done < <(incs $dir/*.[ch])
}
check_top cli '^(server/server\.h|convert/[a-z_]+\.h|[a-z_]+\.h)$'
for d in $tools; do check_top src/$d "^$d/[a-z_]+\.h$"; done
# the CLI's own headers are plain names: make sure none of them shadows an engine header
for h in $(cd cli && ls *.h); do
  for d in $engine; do [ -e "src/$d/$h" ] && bad "cli/$h has the name of src/$d/$h"; done
done

# 4. every source file in a component folder, each folder described in DESIGN.md
for f in src/*; do
  [ -d "$f" ] && continue
  [ "$f" = src/nextn_internal.h ] || bad "$f: source files live in a component folder under src/"
done
for d in src/*/; do
  d=${d%/}
  grep -q "^## .*\`$d/\`" docs/DESIGN.md || bad "docs/DESIGN.md has no section (## ... \`$d/\`) for $d/"
done

[ $fail -eq 0 ] && echo "layout: ok"
exit $fail
