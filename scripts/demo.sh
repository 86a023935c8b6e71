#!/usr/bin/env bash
# The demo: installs missing system packages, builds, and runs `trackpipe demo` on the embedded broker.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
swift build -c release --product trackpipe
exec .build/release/trackpipe demo "$@"
