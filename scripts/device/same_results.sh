#!/usr/bin/env bash
# Does a change keep every result? Builds specgen-bench from two trees (the
# base and the change; each a source folder) and runs `specgen-bench e2e` on
# the bundled suite and on the procedural corpus with each, then compares the
# JSON with the wall times (modes/*/wall_seconds) left out. Virtual-time results
# depend on the code only, so a refactoring must give identical JSON.
#
#   scripts/device/same_results.sh BASE_SRC NEW_SRC OUT_DIR
#
# Needs python3. The Debian packages the build needs come from .debs/ as in
# check.sh (unpacked into /tmp/specgen-prefix). Both builds run side by side.
set -uo pipefail
base=$1 new=$2 out=$3
prefix=/tmp/specgen-prefix
mkdir -p "$out" "$prefix"
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
for f in "$repo"/.debs/*.deb; do [ -e "$f" ] && dpkg -x "$f" "$prefix"; done
export LD_LIBRARY_PATH="$prefix/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
jobs=$(( $(nproc) / 2 )); ((jobs < 1)) && jobs=1
build() {  # src tag
  cmake -S "$1" -B "/tmp/same-$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSPECGEN_WERROR=OFF -DSPECGEN_BUILD_TESTS=OFF \
    -DSPECGEN_BUILD_EXAMPLES=OFF -DCMAKE_PREFIX_PATH="$prefix/usr" > "$out/configure-$2.log" 2>&1 &&
    cmake --build "/tmp/same-$2" -j"$jobs" --target specgen-bench > "$out/build-$2.log" 2>&1
}
build "$base" base & b1=$!
build "$new" new & b2=$!
wait $b1 || { echo "base build failed"; tail -20 "$out/build-base.log"; exit 1; }
wait $b2 || { echo "new build failed"; tail -20 "$out/build-new.log"; exit 1; }
rc=0
for corpus in suite procedural; do
  args=(e2e); [[ $corpus == procedural ]] && args+=(--corpus procedural)
  for tag in base new; do
    (cd "$([[ $tag == base ]] && echo "$base" || echo "$new")" &&
      "/tmp/same-$tag/benchmarks/specgen-bench" "${args[@]}" --out "$out/e2e-$corpus-$tag.json" > "$out/e2e-$corpus-$tag.txt" 2>&1) &
  done
  wait
  python3 - "$out/e2e-$corpus-base.json" "$out/e2e-$corpus-new.json" <<'PY' || rc=1
import json, sys
def strip(x):
    if isinstance(x, dict):
        return {k: strip(v) for k, v in x.items() if k != "wall_seconds"}
    if isinstance(x, list):
        return [strip(v) for v in x]
    return x
a, b = (strip(json.load(open(p))) for p in sys.argv[1:3])
same = a == b
print(f"{sys.argv[1].split('/')[-1]} vs {sys.argv[2].split('/')[-1]}: {'identical' if same else 'DIFFERENT'} (wall times left out)")
sys.exit(0 if same else 1)
PY
done
exit $rc
