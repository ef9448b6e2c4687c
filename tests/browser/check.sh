#!/usr/bin/env bash
# Opens report.html of a quickstart run and of a compare run in headless Chromium: saves a
# screenshot of each (target/report-check/*.png), and fails if a plot or an image did not
# render, or a page logged anything to its console (the reports run no script, so any console
# message is an error: a resource that failed to load, a parse error).
# Usage: tests/browser/check.sh [RDML_BINARY]   (default target/release/rdml)
set -euo pipefail
cd "$(dirname "$0")/../.."
RDML=${1:-target/release/rdml}
OUT=target/report-check
rm -rf "$OUT" && mkdir -p "$OUT"
CHROME=$(command -v chromium || command -v chromium-browser || true)
[ -n "$CHROME" ] || { echo "report check: no chromium (apt-get install chromium)"; exit 1; }
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-$(mktemp -d)}
chrome() { timeout 120 "$CHROME" --headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run "$@"; }

# The runs: one epoch of quickstart (the embedded Fashion-MNIST split, or the full set where it is
# installed), and a small compare on the embedded split.
"$RDML" --quiet quickstart --out "$OUT/qs" --epochs 1 >/dev/null 2>"$OUT/qs.log" || { cat "$OUT/qs.log"; exit 1; }
EMB='data.dataset="fashion-mnist-embedded"'
"$RDML" --quiet compare --configs fashion-c2f2-triplet fashion-c2f2-est --out "$OUT/cmp" \
  --epochs 1 --max-batches 8 --queries 32 --steps 4 --set "$EMB" --set eval.nmi=false >/dev/null 2>"$OUT/cmp.log" || {
  code=$?; [ $code -eq 3 ] || { cat "$OUT/cmp.log"; exit $code; }   # 3: a model at chance still has a report
}

passed=0; failed=0
check() { # NAME REPORT MIN_PLOTS MIN_IMAGES
  local name=$1 report; report=$(realpath "$2")
  chrome --enable-logging=stderr --v=0 --window-size=1280,3000 --screenshot="$OUT/$name.png" \
    "file://$report" 2>"$OUT/$name.chrome.log" >/dev/null || true
  local result
  result=$(chrome --allow-file-access-from-files --virtual-time-budget=10000 --dump-dom \
    "file://$(realpath tests/browser/check.html)?report=file://$report&plots=$3&images=$4" 2>/dev/null | grep -o 'RESULT {.*}' || true)
  local problems=()
  [ -s "$OUT/$name.png" ] || problems+=("no screenshot")
  [ -n "$result" ] || problems+=("the check page produced no result")
  echo "$result" | grep -q '"errors":\[\]' || problems+=("$result")
  if grep -q 'CONSOLE' "$OUT/$name.chrome.log"; then problems+=("console: $(grep 'CONSOLE' "$OUT/$name.chrome.log" | head -3)"); fi
  if [ ${#problems[@]} -eq 0 ]; then
    echo "ok   $name: ${result#RESULT } ($OUT/$name.png)"; passed=$((passed + 1))
  else
    echo "FAIL $name: ${problems[*]}"; failed=$((failed + 1))
  fi
}
check quickstart "$OUT/qs/report.html" 4 40
check compare "$OUT/cmp/report.html" 1 0
check compare-run "$OUT/cmp/fashion-c2f2-est/report.html" 5 40
echo "report check: $passed passed, $failed failed"
[ $failed -eq 0 ]
