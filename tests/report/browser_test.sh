#!/usr/bin/env bash
# The report's page in a real browser: headless Chromium loads the reports of
# small runs and the page must render without a script error, every view with
# content. Exits 77 (a skip, with the reason) where no Chromium is installed.
#
#   browser_test.sh SPECGEN_RUN SPECGEN_REPORT WORK_DIR
set -uo pipefail
run=$1 report=$2 work=$3
browser=""
for b in chromium chromium-browser google-chrome; do
  if command -v "$b" >/dev/null; then browser=$b; break; fi
done
if [[ -z $browser ]]; then
  echo "SKIP: no Chromium (Debian package chromium) installed, so the report's page was not rendered in a browser"
  exit 77
fi
rm -rf "$work" && mkdir -p "$work" || exit 1
fail=0

# dump PAGE: the page's DOM after its scripts ran (a fresh profile each time; root needs --no-sandbox).
dump() {
  timeout 120 "$browser" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run \
    --user-data-dir="$work/profile-$RANDOM" --virtual-time-budget=10000 --dump-dom "file://$1" 2>"$work/browser.log"
}

# check NAME PAGE VIEW...: rendered, no script errors, each VIEW (a section id) with data-items > 0.
check() {
  local name=$1 page=$2 dom
  shift 2
  dom=$(dump "$page")
  if [[ $dom != *'data-rendered="1"'* ]]; then
    echo "FAIL $name: the page did not finish rendering (no data-rendered=\"1\" on <body>)"
    tail -5 "$work/browser.log"
    fail=1
    return
  fi
  local errors
  errors=$(grep -o 'data-errors="[^"]*"' <<<"$dom" || true)
  if [[ -n $errors ]]; then
    echo "FAIL $name: script errors: $errors"
    fail=1
  fi
  local view items
  for view in "$@"; do
    items=$(grep -o "<section[^>]*id=\"$view\"[^>]*>" <<<"$dom" | grep -o 'data-items="[0-9]*"' | grep -o '[0-9]*' || true)
    if [[ -z $items || $items -eq 0 ]]; then
      echo "FAIL $name: view $view has no content (data-items=\"${items:-absent}\")"
      fail=1
    fi
  done
  local ms
  ms=$(grep -o 'data-render-ms="[0-9.]*"' <<<"$dom" | grep -o '[0-9.]*' | head -1)
  echo "ok   $name: rendered in ${ms:-?} ms, views: $*"
}

views=(view-summary view-speedup view-streams view-gpus view-verdicts view-tokens view-best)

# One run, its report written by specgen-run --report.
"$run" --tasks 3 --rounds 2 --out "$work/one" --quiet --report >"$work/one.log" 2>&1 || { echo "FAIL specgen-run"; cat "$work/one.log"; exit 1; }
[[ -f $work/one/report.html ]] || { echo "FAIL specgen-run --report wrote no $work/one/report.html"; exit 1; }
check "one run (specgen-run --report)" "$work/one/report.html" "${views[@]}"

# Two modes overlaid by specgen-report.
"$run" --tasks 3 --rounds 2 --mode sequential --out "$work/sequential" --quiet >"$work/seq.log" 2>&1 || { echo "FAIL specgen-run"; exit 1; }
"$report" -o "$work/two.html" "$work/sequential" "$work/one" >"$work/report.log" 2>&1 || { echo "FAIL specgen-report"; cat "$work/report.log"; exit 1; }
check "two runs overlaid (specgen-report)" "$work/two.html" "${views[@]}"

# A run cut short: one search started, nothing evaluated. The page still loads, saying there is no data.
printf '%s\n' '{"type":"run_start","t_ns":0,"t":0,"format":2,"seed":1,"config":{}}' \
  '{"type":"search_start","t_ns":0,"t":0,"search":0,"task":"relu"}' >"$work/cut.jsonl"
"$report" -o "$work/cut.html" "$work/cut.jsonl" >"$work/report.log" 2>&1 || { echo "FAIL specgen-report on a cut run"; cat "$work/report.log"; exit 1; }
check "a run cut short" "$work/cut.html" view-summary view-tokens
exit $fail
