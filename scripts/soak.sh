#!/usr/bin/env bash
# The long run (not part of CI): a live stream on the embedded broker, the worker killed with
# SIGKILL at random moments and restarted, the broker down now and then; at the end the last
# record per key must equal what the generator sent, and the worker's RSS is tabled.
#   scripts/soak.sh                         # 20 minutes, 20 SIGKILLs, 4 outages
#   scripts/soak.sh --minutes 60 --kills 50 # longer
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
swift build -c release --product trackpipe
swift build -c release --product trackpipe-check
exec .build/release/trackpipe-check soak "$@"
