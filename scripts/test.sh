#!/usr/bin/env bash
# The test command: installs missing system packages, builds, and runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
swift build --build-tests
# Every suite, several test processes at once (why: scripts/run-tests.sh).
./scripts/run-tests.sh
