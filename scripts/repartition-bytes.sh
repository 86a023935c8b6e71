#!/usr/bin/env bash
# What the repartition topic carries per input hit: the bytes of its records (values, as kcat's
# %S counts them) against the input's, on generated hits and the embedded broker.
#
#   scripts/repartition-bytes.sh [--binary PATH] [--count N] [--rate R] [--partitions P]
#
# Batch (the default): --count hits (100,000) generated at once, counted by one
# `run --until-end`; the topics are read once it is done (keep count / partitions well
# below what a partition of the embedded broker keeps, about 5 MB).
# Live (--rate R): `run` counts `generate --rate R` for --count / R seconds; consumers read
# both topics as they are written, as a live run's repartition topic outgrows the broker.
set -euo pipefail
cd "$(dirname "$0")/.."
binary=.build/release/trackpipe
count=100000
rate=""
partitions=16
while [ $# -gt 0 ]; do
    case "$1" in
    --binary) binary="$2"; shift 2 ;;
    --count) count="$2"; shift 2 ;;
    --rate) rate="$2"; shift 2 ;;
    --partitions) partitions="$2"; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 64 ;;
    esac
done
work=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
group=bytes
"$binary" embedded-broker --partitions "$partitions" --topic tracking-hits --topic tracking-aggregates --topic tracking-hits-dlq \
    --topic "$group-repartition" --topic "$group-state" > "$work/broker.out" 2> "$work/broker.err" &
pids+=($!)
for _ in $(seq 100); do
    brokers=$(grep -oE '127\.0\.0\.1:[0-9]+(,127\.0\.0\.1:[0-9]+)*' "$work/broker.out" | head -1 || true)
    [ -n "$brokers" ] && break
    sleep 0.1
done
[ -n "$brokers" ] || { echo "the embedded broker did not start" >&2; cat "$work/broker.err" >&2; exit 1; }
run=("$binary" run --brokers "$brokers" --group "$group" -X session.timeout.ms=6000 --log-level warning)
# Sums kcat's %S (value bytes) lines: records and bytes.
sum() { awk '{ n += 1; b += $1 } END { printf "%d %d\n", n, b }' "$1"; }
if [ -z "$rate" ]; then
    "$binary" generate --count "$count" --seed 7 --brokers "$brokers" > /dev/null
    "${run[@]}" --until-end > "$work/run.out"
    kcat -C -b "$brokers" -t tracking-hits -o beginning -e -q -f '%S\n' > "$work/input"
    kcat -C -b "$brokers" -t "$group-repartition" -o beginning -e -q -f '%S\n' > "$work/repartition"
else
    kcat -C -b "$brokers" -t tracking-hits -o beginning -q -f '%S\n' > "$work/input" &
    pids+=($!)
    kcat -C -b "$brokers" -t "$group-repartition" -o beginning -q -f '%S\n' > "$work/repartition" &
    pids+=($!)
    "${run[@]}" > "$work/run.out" &
    runner=$!
    pids+=($runner)
    # On a loaded machine the embedded broker may let a few messages time out: what reached
    # the input topic is what is counted.
    "$binary" generate --rate "$rate" --count "$count" --brokers "$brokers" > /dev/null || true
    sleep 5
    kill -INT "$runner"
    wait "$runner" || true
    sleep 2
    kill "${pids[1]}" "${pids[2]}"
fi
read -r inputs inputBytes < <(sum "$work/input")
read -r records repartitionBytes < <(sum "$work/repartition")
echo "input: $inputs hits, $inputBytes bytes ($((inputBytes / inputs)) per hit)"
echo "repartition: $records records, $repartitionBytes bytes"
awk -v r="$repartitionBytes" -v i="$inputBytes" -v n="$inputs" \
    'BEGIN { printf "repartition bytes per input hit: %.1f (%.2fx the input'"'"'s bytes)\n", r / n, r / i }'
