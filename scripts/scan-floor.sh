#!/bin/sh
# The scan's floor: trackpipe's normalizer (scan and judge) against simdjson's On-Demand API
# walking the same hits (every field, names compared within each object, every value read; and
# lean, its strings and numbers stepped over), in alternating runs on one thread; prints each run
# and the medians (docs/performance.md).
# Benchmark only: simdjson is no dependency of trackpipe. Installs Debian's libsimdjson-dev and
# g++ if they are missing (root). ROUNDS=9 for more runs.
set -eu
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-5}
missing=""
[ -f /usr/include/simdjson.h ] || missing="$missing libsimdjson-dev"
command -v g++ >/dev/null 2>&1 || missing="$missing g++"
if [ -n "$missing" ]; then
  apt-get update && apt-get install -y $missing
fi
swift build -c release --product trackpipe-bench
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
g++ -O3 -march=native -std=c++17 -o "$work/walk" Benchmarks/simdjson/walk.cpp -lsimdjson
bench=.build/release/trackpipe-bench
"$bench" normalize --skip-baseline --rounds 1 --write-mix "$work/mix.txt" | head -1
for _ in $(seq "$rounds"); do
  "$bench" normalize --skip-baseline | grep "hits/s"
  "$work/walk" "$work/mix.txt"
  "$work/walk" "$work/mix.txt" 5 lean
done | tee "$work/runs"
tr -d , < "$work/runs" | awk '
  function median(a, n,   i, j, x) {
    for (i = 2; i <= n; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] > x; j--) a[j + 1] = a[j]; a[j + 1] = x }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  { for (i = 1; i < NF; i++) if ($(i + 1) == "hits/s") rate = $i }
  /^trackpipe/ { t[++nt] = rate } /walk:/ { s[++ns] = rate } /lean:/ { l[++nl] = rate }
  END {
    mt = median(t, nt); ms = median(s, ns); ml = median(l, nl)
    printf "medians of %d runs, microseconds a hit: trackpipe %.3f, simdjson walk %.3f, lean walk %.3f; trackpipe takes %.2fx the walk'"'"'s time, %.2fx the lean walk'"'"'s\n",
      nt, 1e6 / mt, 1e6 / ms, 1e6 / ml, ms / mt, ml / mt
  }'
