#!/usr/bin/env bash
# The library boundary (docs/DESIGN.md "Layout and boundaries"), checked on the source tree:
#  - include/nextn.h includes no internal header;
#  - engine components (src/{base,gguf,quant,model,forward,spec,sample,tokenizer,api}/) include
#    neither the tools built on them (src/server/, src/convert/) nor src/nextn_internal.h;
#  - code on top of the engine (cli/, src/server/, src/convert/) reaches the engine only through
#    "nextn.h" or "nextn_internal.h"; besides those it includes its own folder's headers (and the
#    CLI the tools' headers);
#  - every source file under src/ sits in a component folder, and each folder has its section in
#    docs/DESIGN.md;
#  - no circles between the files of src/: file X uses file Y when X's object file references a
#    symbol (function or variable) that Y's object file defines (nm of the objects in the build
#    folder, $NEXTN_BUILD or build/); that relation must have no cycle (X uses Y uses ... uses X).
#    A piece two files both need lives in a third file they both use, or in a header as an
#    inline; a run-time dispatch table lives beside the kernels' callers, never in a file its
#    kernels call back into.
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

# 5. no file-level circles among src/** (see the header; needs the objects of a build)
build=${NEXTN_BUILD:-build}
objs=$(find "$build/CMakeFiles" -path '*.dir/src/*' -name '*.c.o' 2>/dev/null | sort)
if [ -z "$objs" ]; then
  bad "no object files of src/ under $build/CMakeFiles (build first, or set NEXTN_BUILD): cannot check for circles"
else
  # "path/CMakeFiles/T.dir/src/x/y.c.o: [value] type symbol" -> "D|U src/x/y.c symbol"; objects
  # whose source is gone (moved or deleted since the build) are left out
  circles=$(
    { nm -A -g --defined-only $objs | sed 's/^/D /'; nm -A -u $objs | sed 's/^/U /'; } 2>/dev/null | awk '
      {
        k = index($0, ".o:"); f = substr($0, 3, k - 3); sub(/^.*\.dir\//, "", f)
        n = split(substr($0, k + 3), w, " ")    # D: value type symbol; U: U symbol
        if (!(f in exists)) exists[f] = (system("test -f \"" f "\"") == 0)
        if (!exists[f]) next
        if ($1 == "D") { if (n == 3 && w[2] ~ /^[A-Z]$/ && w[2] != "W" && !(w[3] in def)) { def[w[3]] = f; nd++ } }
        else if (n == 2) use[++nu] = f SUBSEP w[2]
        next
      }
      END {
        # a reading that finds no calls between files cannot vouch for anything
        if (nd < 100 || nu < 100) { print "read only " nd + 0 " definitions and " nu + 0 " uses from the objects"; exit }
        for (i = 1; i <= nu; i++) {
          split(use[i], a, SUBSEP); y = def[a[2]]
          if (y == "" || y == a[1]) continue
          if (!((a[1], y) in why)) { adj[a[1]] = adj[a[1]] " " y; why[a[1], y] = a[2] }
          else if (length(why[a[1], y]) < 120) why[a[1], y] = why[a[1], y] " " a[2]
          node[a[1]] = node[y] = 1
        }
        # reachability by a walk from every file (a few hundred files: cheap), then groups of
        # files that reach each other
        for (x in node) {
          delete seen; top = 0; stack[++top] = x
          while (top) {
            v = stack[top--]; n = split(adj[v], nb, " ")
            for (k = 1; k <= n; k++) if (!(nb[k] in seen)) { seen[nb[k]] = 1; stack[++top] = nb[k] }
          }
          for (y in seen) reach[x, y] = 1
        }
        for (x in node) {
          if (x in done || !((x, x) in reach)) continue
          g = ""
          for (y in node) if ((x, y) in reach && (y, x) in reach) { g = g " " y; done[y] = 1 }
          print "circle among" g ":"
          n = split(g, m, " ")
          for (i = 1; i <= n; i++) for (j = 1; j <= n; j++)
            if ((m[i], m[j]) in why) print "  " m[i] " uses " m[j] " (" why[m[i], m[j]] ")"
        }
      }')
  if [ -n "$circles" ]; then
    echo "$circles" >&2
    bad "files of src/ call each other in a circle, or the objects could not be read (above); move the shared piece of a circle into a file both use"
  fi
fi

[ $fail -eq 0 ] && echo "layout: ok"
exit $fail
