#!/usr/bin/env bash
# How large the report of a big run is and how fast a browser renders it:
# makes the runs with specgen-run (virtual time, seconds each), writes their
# reports with specgen-report and loads each page REPEATS times in headless
# Chromium, printing the file size and the page's own render time (the
# data-render-ms it sets once every view is drawn). Targets: under 10 MB, under 2 s.
#
#   scripts/report_bench.sh [BUILD_DIR] [REPEATS]     # default build/, 3
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$repo/build}
repeats=${2:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
[[ -n $browser ]] || { echo "no Chromium (Debian package chromium): nothing to measure"; exit 1; }
run=$build/examples/specgen-run report=$build/examples/specgen-report

"$run" --tasks 20 --rounds 100 --out "$work/suite-specgen" --quiet >/dev/null
"$run" --tasks 20 --rounds 100 --mode sequential --out "$work/suite-sequential" --quiet >/dev/null
"$run" --corpus procedural --tasks 20 --rounds 100 --out "$work/procedural" --quiet >/dev/null
"$report" -o "$work/suite.html" "$work/suite-specgen" >/dev/null
"$report" -o "$work/suite-2.html" "$work/suite-sequential" "$work/suite-specgen" >/dev/null
"$report" -o "$work/procedural.html" "$work/procedural" >/dev/null

printf '%-58s %9s %8s %8s %8s  %s\n' report MB jobs forks rounds "render ms (each load)"
for page in suite suite-2 procedural; do
  f=$work/$page.html
  counts=$(python3 - "$f" <<'PY'
import json, re, sys
s = open(sys.argv[1]).read()
d = json.loads(re.search(r'id="specgen-data">(.*?)</script>', s, re.S).group(1))
runs = d["runs"]
print(sum(len(r["jobs"]) for r in runs), sum(len(x["fork_spans"]) for r in runs for x in r["searches"]),
      sum(x["rounds"] for r in runs for x in r["searches"]))
PY
)
  times=()
  for ((i = 0; i < repeats; ++i)); do
    ms=$(timeout 120 "$browser" --headless --no-sandbox --disable-gpu --no-first-run --user-data-dir="$work/profile$i" \
      --virtual-time-budget=20000 --dump-dom "file://$f" 2>/dev/null | grep -o 'data-render-ms="[0-9.]*"' | grep -o '[0-9.]*' | head -1)
    times+=("$(printf '%.0f' "${ms:-nan}")")
  done
  case $page in
    suite) what="suite, 20 tasks x 100 rounds, specgen" ;;
    suite-2) what="suite, 20 tasks x 100 rounds, sequential and specgen" ;;
    procedural) what="procedural corpus (its 6 tasks) x 100 rounds, specgen" ;;
  esac
  read -r jobs forks rounds <<<"$counts"
  printf '%-58s %9.2f %8s %8s %8s  %s\n' "$what" "$(python3 -c "print($(stat -c %s "$f") / 1e6)")" \
    "$jobs" "$forks" "$rounds" "${times[*]}"
done
