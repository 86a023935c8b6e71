#!/usr/bin/env bash
# The long simulator run (not part of CI): random schedules of crashes, rebalances, late hits and
# switches against the real stages and an in-memory Kafka, each checked against the reference
# model (docs/simulation.md). Prints schedules a second and every failing seed; a failing seed
# replays alone with --family F --seed S --schedules 1 (add --trace to see every operation).
#   scripts/simulate.sh                                    # 20 000 schedules of every family
#   scripts/simulate.sh --schedules 100000 --seed 0x7000   # longer, other seeds
#   scripts/simulate.sh --passing                          # only the families expected to pass
#   scripts/simulate.sh --family crash --shrink            # one family, failures shrunk
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
swift build -c release --product trackpipe-check
schedules=20000
for argument in "$@"; do
    [ "$argument" = "--schedules" ] && schedules=""
done
exec .build/release/trackpipe-check simulate ${schedules:+--schedules "$schedules"} "$@"
